#include "common/transform/identity_transform.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gift::transform {

absl::StatusOr<IdentityTransform> IdentityTransform::Create(int64_t d_out, int64_t d_in) {
  if (d_out < 1 || d_in < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor shape ", d_out, "x", d_in));
  }
  return IdentityTransform(d_out, d_in);
}

absl::Status IdentityTransform::Forward(const float* in, int64_t d_out, int64_t d_in,
                                        float* out) const {
  GIFT_RETURN_IF_ERROR(CheckArguments(in, d_out, d_in, out));
  if (out != in) std::memcpy(out, in, sizeof(float) * d_out * d_in);
  return absl::OkStatus();
}

absl::Status IdentityTransform::Inverse(const float* in, int64_t d_out, int64_t d_in,
                                        float* out) const {
  return Forward(in, d_out, d_in, out);
}

}  // namespace gift::transform
