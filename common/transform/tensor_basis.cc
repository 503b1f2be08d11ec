#include "common/transform/tensor_basis.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/finite.h"
#include "common/base/status_macros.h"

namespace gift::transform {
namespace {

// The constant of Fp32ErrorBound (tensor_basis.h).
constexpr double kFp32ErrorConstant = 1.0;

bool HasInput(Sides sides) { return sides == Sides::kInput || sides == Sides::kBoth; }
bool HasOutput(Sides sides) { return sides == Sides::kOutput || sides == Sides::kBoth; }

absl::Status CheckFinite(const float* x, int64_t size, absl::string_view what) {
  if (const int64_t i = FirstNonFinite(x, size); i >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " element ", i, " is not finite"));
  }
  return absl::OkStatus();
}

absl::Status CheckResult(const float* out, int64_t size) {
  if (auto s = CheckFinite(out, size, "result"); !s.ok()) {
    return absl::OutOfRangeError(absl::StrCat("transform overflowed FP32: ", s.message()));
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

TensorBasis::TensorBasis(const TensorBasisHeader& header, std::optional<SideBasis> output_side,
                         std::optional<SideBasis> input_side)
    : header_(header),
      output_side_(std::move(output_side)),
      input_side_(std::move(input_side)),
      fp32_(std::make_shared<const TensorBasisFp32>(output_side_, input_side_, header.d_out,
                                                    header.d_in, header.config.power)) {}

absl::Status TensorBasis::Forward(const float* g, int64_t d_out, int64_t d_in, float* out,
                                  Precision precision) const {
  return Apply(Direction::kForward, g, d_out, d_in, out, precision);
}

absl::Status TensorBasis::Inverse(const float* x, int64_t d_out, int64_t d_in, float* out,
                                  Precision precision) const {
  return Apply(Direction::kInverse, x, d_out, d_in, out, precision);
}

absl::Status TensorBasis::Apply(Direction direction, const float* in, int64_t d_out, int64_t d_in,
                                float* out, Precision precision) const {
  if (precision == Precision::kFp64Reference) {
    return ApplyReference(in, d_out, d_in, /*inverse=*/direction == Direction::kInverse, out);
  }
  LowRankTerm term;
  GIFT_RETURN_IF_ERROR(Prepare(direction, in, d_out, d_in, &term));
  return ApplyRows(term, in, 0, d_out, out);
}

absl::Status TensorBasis::PrepareForward(const float* g, int64_t d_out, int64_t d_in,
                                         LowRankTerm* term) const {
  return Prepare(Direction::kForward, g, d_out, d_in, term);
}

absl::Status TensorBasis::PrepareInverse(const float* x, int64_t d_out, int64_t d_in,
                                         LowRankTerm* term) const {
  return Prepare(Direction::kInverse, x, d_out, d_in, term);
}

absl::Status TensorBasis::CheckShape(const float* in, int64_t d_out, int64_t d_in,
                                     const float* out) const {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (d_out != header_.d_out || d_in != header_.d_in) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", d_out, "x", d_in,
                                                   " for a basis of shape ", header_.d_out, "x",
                                                   header_.d_in));
  }
  return absl::OkStatus();
}

absl::Status TensorBasis::Prepare(Direction direction, const float* in, int64_t d_out, int64_t d_in,
                                  LowRankTerm* term) const {
  if (term == nullptr) return absl::InvalidArgumentError("null term");
  GIFT_RETURN_IF_ERROR(CheckShape(in, d_out, d_in, in));
  // A non-finite element of `in` makes its row of P (or column of Q) non-
  // finite (NaN and Inf propagate through the products, Inf * 0 is NaN), so
  // the input is scanned only when the products are not finite: to name the
  // element, or to go on when the products merely overflowed.
  if (!fp32_->Prepare(direction, in, term)) {
    GIFT_RETURN_IF_ERROR(CheckFinite(in, d_out * d_in, "input"));
  }
  return absl::OkStatus();
}

absl::Status TensorBasis::ApplyRows(const LowRankTerm& term, const float* in, int64_t row0,
                                    int64_t row1, float* out) const {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  const int64_t k = fp32_->k();
  if (term.d_out != header_.d_out || term.d_in != header_.d_in || term.k != k ||
      term.l.size() != static_cast<size_t>(term.d_out * k) ||
      term.r.size() != static_cast<size_t>(k * term.d_in)) {
    return absl::InvalidArgumentError("the term was not prepared by a basis of this shape");
  }
  if (row0 < 0 || row0 > row1 || row1 > header_.d_out) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", row0, ", ", row1, ") of a tensor of ", header_.d_out, " rows"));
  }
  if (!fp32_->ApplyRows(term, in, row0, row1, out)) {
    const int64_t n = header_.d_in;
    return CheckResult(out + row0 * n, (row1 - row0) * n);
  }
  return absl::OkStatus();
}

double TensorBasis::Fp32ErrorBound() const {
  double kappa = 1.0;
  const double p = header_.config.power;
  for (const std::optional<SideBasis>* side : {&output_side_, &input_side_}) {
    if (!side->has_value()) continue;
    const SideBasis::Parts& parts = (*side)->parts();
    const double hi = std::max(1.0, parts.one_plus_sig.maxCoeff());
    const double lo = std::min(1.0, parts.one_plus_sig.minCoeff());
    kappa *= std::pow(hi / lo, p) * std::pow(parts.d.maxCoeff() / parts.d.minCoeff(), p);
  }
  const double dims =
      std::sqrt(static_cast<double>(header_.d_out)) + std::sqrt(static_cast<double>(header_.d_in));
  return kFp32ErrorConstant * std::ldexp(1.0, -24) * dims * std::sqrt(kappa);
}

absl::Status TensorBasis::ApplyReference(const float* in, int64_t d_out, int64_t d_in, bool inverse,
                                         float* out) const {
  GIFT_RETURN_IF_ERROR(CheckShape(in, d_out, d_in, out));
  GIFT_RETURN_IF_ERROR(CheckFinite(in, d_out * d_in, "input"));
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
  return CheckResult(out, d_out * d_in);
}

}  // namespace gift::transform
