// The identity transform: direct quantization, the baseline every other
// transform is measured against. Forward and Inverse copy (nothing when in
// place), so a pipeline built on it reproduces the codec bit for bit.
//
// Thread safety: immutable; see gradient_transform.h.
#ifndef GIFT_COMMON_TRANSFORM_IDENTITY_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_IDENTITY_TRANSFORM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/transform/gradient_transform.h"

namespace gift::transform {

class IdentityTransform final : public GradientTransform {
 public:
  // Fails (InvalidArgument) for d_out or d_in < 1.
  static absl::StatusOr<IdentityTransform> Create(int64_t d_out, int64_t d_in);

  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  int64_t d_out() const override { return d_out_; }
  int64_t d_in() const override { return d_in_; }
  std::string name() const override { return "identity"; }

 private:
  IdentityTransform(int64_t d_out, int64_t d_in) : d_out_(d_out), d_in_(d_in) {}

  int64_t d_out_;
  int64_t d_in_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_IDENTITY_TRANSFORM_H_
