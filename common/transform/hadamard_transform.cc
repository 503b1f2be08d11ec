#include "common/transform/hadamard_transform.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/split_mix64.h"
#include "common/base/status_macros.h"

namespace gift::transform {
namespace {

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// Elements rotated together in RotateRows when the block is at most this
// long (a multiple of every such block, so a span holds whole blocks);
// larger blocks are rotated one at a time.
constexpr int64_t kSpan = 1024;

// Rotates n elements at `src` (n a multiple of `block`) into `dst`, each
// block on its own, in `x` (n doubles of scratch): the unnormalized fast
// Walsh-Hadamard butterflies, run stage by stage over the whole span rather
// than block by block (a stage's pairs never cross a block, so each element
// sees the same operations in the same order either way: the same bits, as
// the CUDA kernel's block-by-block order), which gives the compiler long
// contiguous loops to vectorize.
void RotateSpan(const float* src, const double* sign, int64_t n, int64_t block, double norm,
                bool inverse, double* x, float* dst) {
  if (inverse) {
    for (int64_t j = 0; j < n; ++j) x[j] = src[j] * sign[j];
  } else {
    for (int64_t j = 0; j < n; ++j) x[j] = src[j];
  }
  // The first stage (h = 1) on its own: as the general loop below, whose
  // inner loop of one pair the compiler does not vectorize (a rotated
  // direct worker measured 40 ms per step with it, 30 ms with this loop).
  if (block > 1) {
    for (int64_t k = 0; k < n; k += 2) {
      const double a = x[k], c = x[k + 1];
      x[k] = a + c;
      x[k + 1] = a - c;
    }
  }
  for (int64_t h = 2; h < block; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      double* lo = x + i;
      double* hi = x + i + h;
      for (int64_t j = 0; j < h; ++j) {
        const double a = lo[j], c = hi[j];
        lo[j] = a + c;
        hi[j] = a - c;
      }
    }
  }
  if (inverse) {
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(x[j] * norm);
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(x[j] * norm * sign[j]);
  }
}


}  // namespace

absl::StatusOr<HadamardTransform> HadamardTransform::Create(int64_t d_out, int64_t d_in,
                                                            const HadamardOptions& options) {
  if (d_out < 1 || d_in < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor shape ", d_out, "x", d_in));
  }
  const int64_t block = options.block == 0 ? d_in : options.block;
  if (options.block == 0 && !IsPowerOfTwo(d_in)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "d_in = ", d_in, " is not a power of two: give a power-of-two block that divides it"));
  }
  if (!IsPowerOfTwo(block) || d_in % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block ", options.block, " is not a power of two dividing d_in = ", d_in));
  }
  std::vector<double> signs(d_in);
  uint64_t state = options.seed;
  for (int64_t j = 0; j < d_in; ++j) signs[j] = (SplitMix64(state) >> 63) != 0 ? -1.0 : 1.0;
  return HadamardTransform(d_out, block, std::move(signs));
}

absl::Status HadamardTransform::Forward(const float* in, int64_t d_out, int64_t d_in,
                                        float* out) const {
  return Apply(in, d_out, d_in, /*inverse=*/false, out);
}

absl::Status HadamardTransform::Inverse(const float* in, int64_t d_out, int64_t d_in,
                                        float* out) const {
  return Apply(in, d_out, d_in, /*inverse=*/true, out);
}

absl::Status HadamardTransform::Apply(const float* in, int64_t d_out, int64_t d_in, bool inverse,
                                      float* out) const {
  GIFT_RETURN_IF_ERROR(CheckArguments(in, d_out, d_in, out));
  RotateRows(in, d_out, inverse, out);
  return CheckResultFinite(out, d_out * d_in);
}

void HadamardTransform::RotateRows(const float* in, int64_t rows, bool inverse, float* out) const {
  const int64_t d_in = this->d_in();
  const double norm = 1.0 / std::sqrt(static_cast<double>(block_));
  const int64_t span = std::max(kSpan, block_);
  double stack[kSpan];
  std::vector<double> heap(block_ > kSpan ? block_ : 0);
  double* x = block_ > kSpan ? heap.data() : stack;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t start = 0; start < d_in; start += span) {
      RotateSpan(in + i * d_in + start, signs_.data() + start, std::min(span, d_in - start),
                 block_, norm, inverse, x, out + i * d_in + start);
    }
  }
}

std::string HadamardTransform::name() const { return absl::StrCat("hadamard(block=", block_, ")"); }

}  // namespace gift::transform
