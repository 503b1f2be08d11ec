#include "common/transform/tensor_basis_transform.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

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

namespace {

struct TermState final : ForwardRowsState {
  LowRankTerm term;
};

}  // namespace

absl::StatusOr<int64_t> TensorBasisTransform::BeginForward(
    const float* in, float* out, std::unique_ptr<ForwardRowsState>* state) const {
  if (in == nullptr || out == nullptr || state == nullptr) {
    return absl::InvalidArgumentError("null buffer");
  }
  if (dynamic_cast<TermState*>(state->get()) == nullptr) *state = std::make_unique<TermState>();
  auto& term = static_cast<TermState&>(**state).term;
  GIFT_RETURN_IF_ERROR(basis_.PrepareForward(in, d_out(), d_in(), &term));
  return 0;
}

absl::Status TensorBasisTransform::ForwardRows(const ForwardRowsState& state, const float* in,
                                               int64_t row0, int64_t row1, float* out) const {
  const auto* term = dynamic_cast<const TermState*>(&state);
  if (term == nullptr) return absl::InvalidArgumentError("state not from BeginForward");
  return basis_.ApplyRows(term->term, in, row0, row1, out);
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
