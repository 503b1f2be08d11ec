// The geometry-aware transform of one 2-D weight gradient G (d_out x d_in,
// row-major FP32) and its exact inverse:
//
//   T(G)      = W_out,p G W_in,p^T      (forward, before quantization)
//   T^{-1}(X) = W_out,p^{-1} X W_in,p^{-T}  (inverse, after the sum)
//
// with W_p the power-p operator of each side's SideBasis (side_basis.h):
// F^{-p} for the isotropic residual, so T(G) = F_out^{-p} G F_in^{-p}. A side
// not enabled is the identity. Cost O(d_out * d_in * r) each way.
//
//   auto basis = TensorBasis::Create({.tensor_id = 7, .version = 3, .d_out = m,
//                                     .d_in = n, .config = {Sides::kBoth, 0.25}},
//                                    std::move(out_side), std::move(in_side));
//   GIFT_RETURN_IF_ERROR(basis->Forward(grad, m, n, transformed));
//
// Precision: each side works in double on blocks of rows (side_basis.h) and
// rounds to FP32 when it writes; with both sides the input side runs first
// and its FP32 result feeds the output side.
//
// Thread safety: immutable after construction; Forward and Inverse may run
// concurrently on different buffers.
#ifndef GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_
#define GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transform/side_basis.h"

namespace gift::transform {

// Which sides are transformed. Values are part of the serialized form.
enum class Sides : uint8_t {
  kInput = 1,   // G W_in^T   (columns of G, dimension d_in)
  kOutput = 2,  // W_out G    (rows of G, dimension d_out)
  kBoth = 3,
};

struct TransformConfig {
  Sides sides = Sides::kBoth;
  double power = 0.25;  // p > 0, finite
};

struct TensorBasisHeader {
  uint64_t tensor_id = 0;
  uint64_t version = 0;  // of the basis (e.g. the refresh count)
  int64_t d_out = 0;
  int64_t d_in = 0;
  TransformConfig config;
};

class TensorBasis {
 public:
  // `output_side` (dimension d_out) must be present exactly when the config
  // has the output side, `input_side` (dimension d_in) exactly when it has
  // the input side. Fails (InvalidArgument) otherwise, or for p <= 0, a
  // non-finite p, or d_out, d_in < 1.
  static absl::StatusOr<TensorBasis> Create(const TensorBasisHeader& header,
                                            std::optional<SideBasis> output_side,
                                            std::optional<SideBasis> input_side);

  // out = T(g). g and out hold d_out x d_in floats; out may equal g (in
  // place) but must not otherwise overlap it. Fails (InvalidArgument) on a
  // shape other than the basis's or a non-finite element of g, leaving out
  // untouched; (OutOfRange) when the result overflows FP32, with out then
  // unspecified.
  absl::Status Forward(const float* g, int64_t d_out, int64_t d_in, float* out) const;

  // out = T^{-1}(x), with the same contract.
  absl::Status Inverse(const float* x, int64_t d_out, int64_t d_in, float* out) const;

  const TensorBasisHeader& header() const { return header_; }
  const std::optional<SideBasis>& output_side() const { return output_side_; }
  const std::optional<SideBasis>& input_side() const { return input_side_; }

 private:
  TensorBasis(const TensorBasisHeader& header, std::optional<SideBasis> output_side,
              std::optional<SideBasis> input_side)
      : header_(header), output_side_(std::move(output_side)), input_side_(std::move(input_side)) {}

  absl::Status Apply(const float* in, int64_t d_out, int64_t d_in, bool inverse, float* out) const;

  TensorBasisHeader header_;
  std::optional<SideBasis> output_side_;
  std::optional<SideBasis> input_side_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_
