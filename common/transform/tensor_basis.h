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
// Precision (the `precision` argument of Forward / Inverse):
//   kFp32Blas (the default; what TensorBasisTransform and so the worker
//     use): FP32 SGEMMs through CBLAS / OpenBLAS with both sides, the
//     diagonal scalings and the rank-r updates folded into two skinny
//     products and one update (tensor_basis_fp32.h). Threads: the process's
//     BLAS setting (blas_runtime.h). Against the double reference its
//     result Y satisfies (stated, and checked by tests/transform/
//     tensor_basis_fp32_test.cc on every shape, rank, residual model, side
//     set and power of the transform tests, both directions)
//       ||Y - Y_ref||_F <= Fp32ErrorBound() * ||Y_ref||_F,
//       Fp32ErrorBound() = 2^-24 * (sqrt(d_out) + sqrt(d_in)) * sqrt(kappa),
//     kappa = prod over the present sides of a bound on the condition
//     number of that side's W_p (the same for W_p^{-1}):
//     (max(1, max(1+Sig)) / min(1, min(1+Sig)))^p * (max D / min D)^p.
//     The sqrt terms are the random-walk growth of FP32 dot products of that
//     length; the worst ratio measured to the bound is 0.13 (kappa from 1 to
//     3e4: the measured error grows like kappa^0.2 at most, since no large
//     terms cancel: a full-rank side drops its identity term), so the bound
//     has a margin of about 8x. Forward then inverse returns G within twice
//     the bound. Against a dense double operator, rather than the reference,
//     add the reference's own FP32 rounding (about 2^-24).
//   kFp64Reference: each side in double on blocks of rows (side_basis.h),
//     rounded to FP32 when it writes; with both sides the input side runs
//     first and its FP32 result feeds the output side. Single-threaded.
//
// Row ranges (FP32 path only), so that a caller can pipeline per chunk of
// rows: the output side's update needs Z_out^T X over all rows, so
// PrepareForward / PrepareInverse read the whole input once and fill a
// LowRankTerm; ApplyRows then writes any rows of the result, in any order,
// each call reading only its own rows of the input. Forward(kFp32Blas) is
// Prepare + ApplyRows over all rows; ranges whose ends are multiples of
// TensorBasisFp32::kRowBlock (256) or d_out give exactly its bits, other
// ranges differ from it by rounding only (within the bound above).
//
// Thread safety: immutable after construction; every const method may run
// concurrently on different buffers (and different LowRankTerm).
#ifndef GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_
#define GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis_fp32.h"

namespace gift::transform {

// Which sides are transformed. Values are part of the serialized form.
enum class Sides : uint8_t {
  kInput = 1,   // G W_in^T   (columns of G, dimension d_in)
  kOutput = 2,  // W_out G    (rows of G, dimension d_out)
  kBoth = 3,
};

// The arithmetic of Forward / Inverse (see the header comment).
enum class Precision : uint8_t {
  kFp32Blas = 0,
  kFp64Reference = 1,
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
  absl::Status Forward(const float* g, int64_t d_out, int64_t d_in, float* out,
                       Precision precision = Precision::kFp32Blas) const;

  // out = T^{-1}(x), with the same contract.
  absl::Status Inverse(const float* x, int64_t d_out, int64_t d_in, float* out,
                       Precision precision = Precision::kFp32Blas) const;

  // The FP32 path in row ranges (see the header comment). Prepare* checks
  // the shape and that every element of `in` is finite (InvalidArgument),
  // then fills `term` (caller-owned, reusable). ApplyRows writes rows
  // [row0, row1) of the result into the same rows of `out`, with `in` and
  // `out` the whole d_out x d_in buffers given to / meant for Prepare (out
  // == in allowed; rows of `in` not yet applied must be unchanged since
  // Prepare). Fails with InvalidArgument on a bad range or a term from
  // another shape, OutOfRange when a written row overflows FP32.
  absl::Status PrepareForward(const float* g, int64_t d_out, int64_t d_in, LowRankTerm* term) const;
  absl::Status PrepareInverse(const float* x, int64_t d_out, int64_t d_in, LowRankTerm* term) const;
  absl::Status ApplyRows(const LowRankTerm& term, const float* in, int64_t row0, int64_t row1,
                         float* out) const;

  // The relative Frobenius error bound of the FP32 path against the double
  // reference (header comment), for this basis; either direction.
  double Fp32ErrorBound() const;

  const TensorBasisHeader& header() const { return header_; }
  const std::optional<SideBasis>& output_side() const { return output_side_; }
  const std::optional<SideBasis>& input_side() const { return input_side_; }

 private:
  TensorBasis(const TensorBasisHeader& header, std::optional<SideBasis> output_side,
              std::optional<SideBasis> input_side);

  absl::Status CheckShape(const float* in, int64_t d_out, int64_t d_in, const float* out) const;
  absl::Status Prepare(Direction direction, const float* in, int64_t d_out, int64_t d_in,
                       LowRankTerm* term) const;
  absl::Status ApplyReference(const float* in, int64_t d_out, int64_t d_in, bool inverse,
                              float* out) const;
  // Forward or Inverse over the whole tensor.
  absl::Status Apply(Direction direction, const float* in, int64_t d_out, int64_t d_in, float* out,
                     Precision precision) const;

  TensorBasisHeader header_;
  std::optional<SideBasis> output_side_;
  std::optional<SideBasis> input_side_;
  // The FP32 operands, shared by copies (immutable).
  std::shared_ptr<const TensorBasisFp32> fp32_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_BASIS_H_
