// A transform followed by a randomized Hadamard rotation of each row in
// blocks (the policy's transform.rotation_block):
//
//   Forward:  X = R(T(G))          Inverse:  G = T^{-1}(R^{-1}(X))
//
// with T any GradientTransform (the identity for direct quantization, a
// TensorBasisTransform for GIFT) and R the block-diagonal HadamardTransform
// (hadamard_transform.h: blocks of `block` elements of each row, a seeded
// random sign per column). R spreads each block's energy evenly over its
// elements, so a block-scaled codec whose blocks lie inside R's blocks (NVFP4's
// 16, or 32 with blocks of 32 and more) sees a lower in-block dynamic range:
// fewer elements flushed to zero (docs/fidelity.md, "NVFP4 and the
// rotation"). R is orthogonal, so the inverse is exact up to FP32 rounding,
// and linear, so the servers' sum of rotated contributions is the rotation of
// the sum: they sum in R's coordinates and each worker applies R^{-1} once,
// after the pull.
//
// R depends only on (d_in, block, seed; the workers use kSeed): every
// worker that builds it for the same shape and block has the same R, bit
// for bit (and the CUDA rotation, kernels/transform/rotation_cuda.h,
// computes the same bits).
//
// The forward streams by rows as T does (forward_row_block() is T's): R works
// within rows, so each row block T writes is rotated as it is written.
//
// Ownership: shares ownership of T. Thread safety: immutable; see
// gradient_transform.h.
#ifndef GIFT_COMMON_TRANSFORM_ROTATED_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_ROTATED_TRANSFORM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transform/gradient_transform.h"
#include "common/transform/hadamard_transform.h"

namespace gift::transform {

class RotatedTransform final : public GradientTransform {
 public:
  // The largest block a rotation may use: the CUDA kernel keeps one block
  // per thread in local memory (kernels/transform/rotation_cuda.cc checks
  // that its bound covers this one; the policy's bound is checked against
  // it where both are seen, worker/engine/tensor_buffers.cc).
  static constexpr int64_t kMaxBlock = 256;

  // The signs' seed every worker uses (the policy's rotation).
  static constexpr uint64_t kSeed = HadamardOptions{}.seed;

  // Fails (InvalidArgument) on a null `inner`, or a block that is not a
  // power of two in [2, kMaxBlock] dividing inner->d_in().
  static absl::StatusOr<std::shared_ptr<const RotatedTransform>> Create(
      std::shared_ptr<const GradientTransform> inner, int64_t block, uint64_t seed = kSeed);

  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::StatusOr<int64_t> BeginForward(const float* in, float* out,
                                       std::unique_ptr<ForwardRowsState>* state) const override;
  absl::Status ForwardRows(const ForwardRowsState& state, const float* in, int64_t row0,
                           int64_t row1, float* out) const override;
  int64_t forward_row_block() const override { return inner_->forward_row_block(); }
  int64_t d_out() const override { return inner_->d_out(); }
  int64_t d_in() const override { return inner_->d_in(); }
  // E.g. "identity+hadamard(block=32)".
  std::string name() const override;

  const GradientTransform& inner() const { return *inner_; }
  const std::shared_ptr<const GradientTransform>& shared_inner() const { return inner_; }
  const HadamardTransform& rotation() const { return rotation_; }

 private:
  RotatedTransform(std::shared_ptr<const GradientTransform> inner, HadamardTransform rotation,
                   bool direct)
      : inner_(std::move(inner)), rotation_(std::move(rotation)), direct_(direct) {}

  // Rotates rows [row0, row1) of `out` in place; OutOfRange when one
  // overflows FP32.
  absl::Status RotateInPlace(float* out, int64_t row0, int64_t row1) const;

  std::shared_ptr<const GradientTransform> inner_;
  HadamardTransform rotation_;
  const bool direct_;  // inner_ is the identity: the rotation alone
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_ROTATED_TRANSFORM_H_
