#include "common/transform/hadamard_transform.h"

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
  const double norm = 1.0 / std::sqrt(static_cast<double>(block_));
  std::vector<double> row(d_in);
  for (int64_t i = 0; i < d_out; ++i) {
    const float* src = in + i * d_in;
    for (int64_t j = 0; j < d_in; ++j) row[j] = inverse ? src[j] * signs_[j] : src[j];
    for (int64_t start = 0; start < d_in; start += block_) {
      FastWalshHadamard(row.data() + start, block_);
    }
    float* dst = out + i * d_in;
    for (int64_t j = 0; j < d_in; ++j) {
      dst[j] = static_cast<float>(inverse ? row[j] * norm : row[j] * norm * signs_[j]);
    }
  }
  return CheckResultFinite(out, d_out * d_in);
}

std::string HadamardTransform::name() const { return absl::StrCat("hadamard(block=", block_, ")"); }

}  // namespace gift::transform
