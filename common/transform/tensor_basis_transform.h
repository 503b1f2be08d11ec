// TensorBasis (tensor_basis.h) behind the GradientTransform interface: an
// adapter that owns one basis and forwards to its Forward / Inverse, so
// TensorBasis keeps its own API and serialized form unchanged.
//
// Thread safety: immutable; see gradient_transform.h.
#ifndef GIFT_COMMON_TRANSFORM_TENSOR_BASIS_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_TENSOR_BASIS_TRANSFORM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/transform/gradient_transform.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_fp32.h"

namespace gift::transform {

class TensorBasisTransform final : public GradientTransform {
 public:
  explicit TensorBasisTransform(TensorBasis basis) : basis_(std::move(basis)) {}

  // TensorBasis::Forward / Inverse: the same contract as this interface's.
  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  // Streamed: BeginForward is TensorBasis::PrepareForward (the products
  // over all of `in`; writes no row), ForwardRows its ApplyRows, in blocks
  // of TensorBasisFp32::kRowBlock rows.
  absl::StatusOr<int64_t> BeginForward(const float* in, float* out,
                                       std::unique_ptr<ForwardRowsState>* state) const override;
  absl::Status ForwardRows(const ForwardRowsState& state, const float* in, int64_t row0,
                           int64_t row1, float* out) const override;
  int64_t forward_row_block() const override { return TensorBasisFp32::kRowBlock; }
  int64_t d_out() const override { return basis_.header().d_out; }
  int64_t d_in() const override { return basis_.header().d_in; }
  // E.g. "tensor_basis(v3,both,p=0.25,r_out=64,r_in=64)".
  std::string name() const override;

  const TensorBasis& basis() const { return basis_; }

 private:
  TensorBasis basis_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_BASIS_TRANSFORM_H_
