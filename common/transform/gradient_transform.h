// The interface of a linear, invertible change of coordinates applied to one
// 2-D weight gradient G (d_out x d_in, row-major FP32) before quantization,
// and undone after the servers' sum:
//
//   X = Forward(G)     on the worker, before encoding
//   G = Inverse(X)     after decoding the (reduced) sum
//
// Every implementation is linear, so the inverse of a sum of transformed
// contributions is the sum of the contributions. Implementations in this
// folder: IdentityTransform (direct quantization), TensorBasisTransform (the
// O(d_out d_in r) two-sided power family), DenseWhiteningTransform (the
// published dense Cholesky form, a reference) and HadamardTransform (a
// randomized Hadamard rotation).
//
// Contract of Forward and Inverse:
//   - `in` and `out` hold d_out x d_in floats (row-major); the shape passed
//     must equal the transform's shape, else InvalidArgument.
//   - `out` may equal `in` (in place) but must not otherwise overlap it.
//   - A non-finite element of `in` is refused with InvalidArgument, and
//     `out` is left untouched; a result that overflows FP32 is reported as
//     OutOfRange, `out` then unspecified.
//
// Thread safety: implementations are immutable after construction; all const
// methods may be called concurrently (on different output buffers).
#ifndef GIFT_COMMON_TRANSFORM_GRADIENT_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_GRADIENT_TRANSFORM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::transform {

// What a row-streamed forward keeps from BeginForward for ForwardRows: each
// implementation that streams derives its own. Owned by the caller.
class ForwardRowsState {
 public:
  virtual ~ForwardRowsState() = default;
};

class GradientTransform {
 public:
  virtual ~GradientTransform() = default;

  // out = T(in); see the contract above.
  virtual absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const = 0;
  // out = T^{-1}(in); see the contract above.
  virtual absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const = 0;

  // Row-streamed forward, so that a caller can encode and send a tensor's
  // first rows while later ones are still transformed:
  //   - BeginForward checks `in` as Forward does, reads all of it once (what
  //     every row of T(in) depends on), keeps that in `*state` (made, or
  //     reused when this transform made it), and returns how many leading
  //     rows of `out` it already wrote (0 to d_out).
  //   - ForwardRows then writes rows [row0, row1) of out = T(in), in any
  //     order, each call reading only rows [row0, row1) of `in` (out == in
  //     allowed); `in` must not change in between. A result that overflows
  //     FP32 is OutOfRange, as in Forward.
  //   - Rows written in ranges whose ends are multiples of
  //     forward_row_block() (or d_out) have exactly Forward's bits.
  // The default writes the whole result in BeginForward (returns d_out) and
  // has no rows left for ForwardRows (FailedPrecondition).
  virtual absl::StatusOr<int64_t> BeginForward(const float* in, float* out,
                                               std::unique_ptr<ForwardRowsState>* state) const;
  virtual absl::Status ForwardRows(const ForwardRowsState& state, const float* in, int64_t row0,
                                   int64_t row1, float* out) const;
  virtual int64_t forward_row_block() const { return d_out(); }

  // The shape the transform applies to.
  virtual int64_t d_out() const = 0;
  virtual int64_t d_in() const = 0;

  // A short description for reports, e.g. "hadamard(block=512)".
  virtual std::string name() const = 0;

 protected:
  // The common precondition checks: non-null buffers, the transform's shape,
  // and (for `in`) finite elements. InvalidArgument naming the problem.
  absl::Status CheckArguments(const float* in, int64_t d_out, int64_t d_in, const float* out) const;
};

// Fails (OutOfRange) when one of the `size` floats at `x` is not finite;
// used by implementations after they write their result.
absl::Status CheckResultFinite(const float* x, int64_t size);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_GRADIENT_TRANSFORM_H_
