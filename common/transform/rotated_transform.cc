#include "common/transform/rotated_transform.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/identity_transform.h"

namespace gift::transform {

absl::StatusOr<std::shared_ptr<const RotatedTransform>> RotatedTransform::Create(
    std::shared_ptr<const GradientTransform> inner, int64_t block, uint64_t seed) {
  if (inner == nullptr) return absl::InvalidArgumentError("null transform to rotate");
  if (block < 2 || block > kMaxBlock) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotation block ", block, " is not in [2, ", kMaxBlock, "]"));
  }
  GIFT_ASSIGN_OR_RETURN(
      HadamardTransform rotation,
      HadamardTransform::Create(inner->d_out(), inner->d_in(), {.seed = seed, .block = block}));
  const bool direct = dynamic_cast<const IdentityTransform*>(inner.get()) != nullptr;
  return std::shared_ptr<const RotatedTransform>(
      new RotatedTransform(std::move(inner), std::move(rotation), direct));
}

absl::Status RotatedTransform::RotateInPlace(float* out, int64_t row0, int64_t row1) const {
  float* rows = out + row0 * d_in();
  rotation_.RotateRows(rows, row1 - row0, /*inverse=*/false, rows);
  return CheckResultFinite(rows, (row1 - row0) * d_in());
}

absl::Status RotatedTransform::Forward(const float* in, int64_t d_out, int64_t d_in,
                                       float* out) const {
  // The identity's copy would be the rotation's input: rotate from `in`.
  if (direct_) return rotation_.Forward(in, d_out, d_in, out);
  GIFT_RETURN_IF_ERROR(inner_->Forward(in, d_out, d_in, out));
  return RotateInPlace(out, 0, d_out);
}

absl::Status RotatedTransform::Inverse(const float* in, int64_t d_out, int64_t d_in,
                                       float* out) const {
  GIFT_RETURN_IF_ERROR(rotation_.Inverse(in, d_out, d_in, out));
  if (direct_) return absl::OkStatus();
  return inner_->Inverse(out, d_out, d_in, out);
}

absl::StatusOr<int64_t> RotatedTransform::BeginForward(
    const float* in, float* out, std::unique_ptr<ForwardRowsState>* state) const {
  if (direct_) {
    GIFT_RETURN_IF_ERROR(Forward(in, d_out(), d_in(), out));
    return d_out();
  }
  GIFT_ASSIGN_OR_RETURN(const int64_t written, inner_->BeginForward(in, out, state));
  GIFT_RETURN_IF_ERROR(RotateInPlace(out, 0, written));
  return written;
}

absl::Status RotatedTransform::ForwardRows(const ForwardRowsState& state, const float* in,
                                           int64_t row0, int64_t row1, float* out) const {
  GIFT_RETURN_IF_ERROR(inner_->ForwardRows(state, in, row0, row1, out));
  return RotateInPlace(out, row0, row1);
}

std::string RotatedTransform::name() const {
  return absl::StrCat(inner_->name(), "+", rotation_.name());
}

}  // namespace gift::transform
