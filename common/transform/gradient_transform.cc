#include "common/transform/gradient_transform.h"

#include "absl/strings/str_cat.h"
#include "common/base/finite.h"
#include "common/base/status_macros.h"

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
  if (const int64_t i = FirstNonFinite(in, d_out * d_in); i >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": input element ", i, " is not finite"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GradientTransform::BeginForward(
    const float* in, float* out, std::unique_ptr<ForwardRowsState>* /*state*/) const {
  GIFT_RETURN_IF_ERROR(Forward(in, d_out(), d_in(), out));
  return d_out();
}

absl::Status GradientTransform::ForwardRows(const ForwardRowsState& /*state*/, const float* /*in*/,
                                            int64_t row0, int64_t row1, float* /*out*/) const {
  return absl::FailedPreconditionError(absl::StrCat(name(), ": rows [", row0, ", ", row1,
                                                    ") requested: BeginForward writes every row"));
}

absl::Status CheckResultFinite(const float* x, int64_t size) {
  if (const int64_t i = FirstNonFinite(x, size); i >= 0) {
    return absl::OutOfRangeError(absl::StrCat("result element ", i, " overflows FP32"));
  }
  return absl::OkStatus();
}

}  // namespace gift::transform
