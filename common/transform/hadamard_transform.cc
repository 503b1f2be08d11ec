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

// In-place unnormalized Walsh-Hadamard transform of b = 2^k values.
void FastWalshHadamard(double* x, int64_t b) {
  for (int64_t h = 1; h < b; h *= 2) {
    for (int64_t i = 0; i < b; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const double a = x[j], c = x[j + h];
        x[j] = a + c;
        x[j + h] = a - c;
      }
    }
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

namespace {

// Elements rotated together in RotateRows: a multiple of every block up to
// kStackBlock, so a span holds whole blocks.
constexpr int64_t kSpan = 1024;

// Rotates n elements at `src` (n a multiple of `block`, at most kSpan) into
// `dst`, each block on its own. The butterflies run stage by stage over the
// whole span rather than block by block (a stage's pairs never cross a
// block, so every element sees the same operations in the same order as in
// FastWalshHadamard: the same bits), which gives the compiler long
// contiguous loops to vectorize.
void RotateSpan(const float* src, const double* sign, int64_t n, int64_t block, double norm,
                bool inverse, float* dst) {
  double x[kSpan];
  if (inverse) {
    for (int64_t j = 0; j < n; ++j) x[j] = src[j] * sign[j];
  } else {
    for (int64_t j = 0; j < n; ++j) x[j] = src[j];
  }
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

void HadamardTransform::RotateRows(const float* in, int64_t rows, bool inverse, float* out) const {
  const int64_t d_in = this->d_in();
  const double norm = 1.0 / std::sqrt(static_cast<double>(block_));
  if (block_ <= kStackBlock) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t start = 0; start < d_in; start += kSpan) {
        const int64_t n = std::min(kSpan, d_in - start);
        RotateSpan(in + i * d_in + start, signs_.data() + start, n, block_, norm, inverse,
                   out + i * d_in + start);
      }
    }
    return;
  }
  // Blocks above kStackBlock (the whole row of a reference transform), one
  // at a time in a row-sized buffer.
  std::vector<double> x(block_);
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = in + i * d_in;
    float* dst = out + i * d_in;
    for (int64_t start = 0; start < d_in; start += block_) {
      const double* s = signs_.data() + start;
      for (int64_t j = 0; j < block_; ++j) x[j] = inverse ? src[start + j] * s[j] : src[start + j];
      FastWalshHadamard(x.data(), block_);
      for (int64_t j = 0; j < block_; ++j) {
        dst[start + j] = static_cast<float>(inverse ? x[j] * norm : x[j] * norm * s[j]);
      }
    }
  }
}

std::string HadamardTransform::name() const { return absl::StrCat("hadamard(block=", block_, ")"); }

}  // namespace gift::transform
