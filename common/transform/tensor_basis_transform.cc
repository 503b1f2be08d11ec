#include "common/transform/tensor_basis_transform.h"

#include "absl/strings/str_cat.h"

namespace gift::transform {

absl::Status TensorBasisTransform::Forward(const float* in, int64_t d_out, int64_t d_in,
                                           float* out) const {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  return basis_.Forward(in, d_out, d_in, out);
}

absl::Status TensorBasisTransform::Inverse(const float* in, int64_t d_out, int64_t d_in,
                                           float* out) const {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  return basis_.Inverse(in, d_out, d_in, out);
}

std::string TensorBasisTransform::name() const {
  const TensorBasisHeader& h = basis_.header();
  const char* sides =
      h.config.sides == Sides::kInput ? "in" : (h.config.sides == Sides::kOutput ? "out" : "both");
  std::string name = absl::StrCat("tensor_basis(v", h.version, ",", sides, ",p=", h.config.power);
  if (basis_.output_side().has_value()) {
    absl::StrAppend(&name, ",r_out=", basis_.output_side()->rank());
  }
  if (basis_.input_side().has_value()) {
    absl::StrAppend(&name, ",r_in=", basis_.input_side()->rank());
  }
  return name + ")";
}

}  // namespace gift::transform
