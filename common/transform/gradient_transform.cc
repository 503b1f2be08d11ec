#include "common/transform/gradient_transform.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace gift::transform {

absl::Status GradientTransform::CheckArguments(const float* in, int64_t d_out, int64_t d_in,
                                               const float* out) const {
  if (in == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": null buffer"));
  }
  if (d_out != this->d_out() || d_in != this->d_in()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": shape ", d_out, "x", d_in,
                                                   " given for a transform of shape ",
                                                   this->d_out(), "x", this->d_in()));
  }
  const int64_t size = d_out * d_in;
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(in[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": input element ", i, " is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckResultFinite(const float* x, int64_t size) {
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::OutOfRangeError(absl::StrCat("result element ", i, " overflows FP32"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::transform
