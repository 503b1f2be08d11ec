#include "common/transform/tensor_basis.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/finite.h"
#include "common/base/status_macros.h"

namespace gift::transform {
namespace {

bool HasInput(Sides sides) { return sides == Sides::kInput || sides == Sides::kBoth; }
bool HasOutput(Sides sides) { return sides == Sides::kOutput || sides == Sides::kBoth; }

absl::Status CheckFinite(const float* x, int64_t size, absl::string_view what) {
  if (const int64_t i = FirstNonFinite(x, size); i >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " element ", i, " is not finite"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorBasis> TensorBasis::Create(const TensorBasisHeader& header,
                                                std::optional<SideBasis> output_side,
                                                std::optional<SideBasis> input_side) {
  const Sides sides = header.config.sides;
  if (sides != Sides::kInput && sides != Sides::kOutput && sides != Sides::kBoth) {
    return absl::InvalidArgumentError(absl::StrCat("unknown sides ", static_cast<int>(sides)));
  }
  const double p = header.config.power;
  if (!(p > 0.0) || !std::isfinite(p)) {
    return absl::InvalidArgumentError(absl::StrCat("power ", p, " is not a finite value > 0"));
  }
  if (header.d_out < 1 || header.d_in < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tensor shape ", header.d_out, "x", header.d_in));
  }
  if (HasOutput(sides) != output_side.has_value() || HasInput(sides) != input_side.has_value()) {
    return absl::InvalidArgumentError("the sides given do not match the configured sides");
  }
  if (output_side.has_value() && output_side->dim() != header.d_out) {
    return absl::InvalidArgumentError(absl::StrCat("output side of dimension ", output_side->dim(),
                                                   " for d_out = ", header.d_out));
  }
  if (input_side.has_value() && input_side->dim() != header.d_in) {
    return absl::InvalidArgumentError(
        absl::StrCat("input side of dimension ", input_side->dim(), " for d_in = ", header.d_in));
  }
  return TensorBasis(header, std::move(output_side), std::move(input_side));
}

absl::Status TensorBasis::Forward(const float* g, int64_t d_out, int64_t d_in, float* out) const {
  return Apply(g, d_out, d_in, /*inverse=*/false, out);
}

absl::Status TensorBasis::Inverse(const float* x, int64_t d_out, int64_t d_in, float* out) const {
  return Apply(x, d_out, d_in, /*inverse=*/true, out);
}

absl::Status TensorBasis::Apply(const float* in, int64_t d_out, int64_t d_in, bool inverse,
                                float* out) const {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (d_out != header_.d_out || d_in != header_.d_in) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", d_out, "x", d_in,
                                                   " for a basis of shape ", header_.d_out, "x",
                                                   header_.d_in));
  }
  const int64_t size = d_out * d_in;
  GIFT_RETURN_IF_ERROR(CheckFinite(in, size, "input"));
  const double p = header_.config.power;
  const float* src = in;
  if (input_side_.has_value()) {
    GIFT_RETURN_IF_ERROR(inverse ? input_side_->InverseRight(src, d_out, p, out)
                                 : input_side_->ForwardRight(src, d_out, p, out));
    src = out;
  }
  if (output_side_.has_value()) {
    GIFT_RETURN_IF_ERROR(inverse ? output_side_->InverseLeft(src, d_in, p, out)
                                 : output_side_->ForwardLeft(src, d_in, p, out));
  }
  if (auto s = CheckFinite(out, size, "result"); !s.ok()) {
    return absl::OutOfRangeError(absl::StrCat("transform overflowed FP32: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace gift::transform
