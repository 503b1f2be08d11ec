// The FP32 form of TensorBasis's operator (tensor_basis.h), on SGEMMs of a
// CBLAS library (OpenBLAS; threads: blas_runtime.h). Both sides, their
// diagonal scalings and both rank-r updates are folded into
//
//   out = A X B + L R      A = diag(a) (d_out), B = diag(b) (d_in),
//                          L: d_out x k, R: k x d_in, k = r_out + r_in,
//
// where L and R depend on X through two skinny products over all of X
// (Prepare), after which any range of rows of `out` costs one scaling pass
// and one k-deep SGEMM accumulated with beta = 1 (ApplyRows). With each side
// W_p = S(-p) D^{-p}, S(q) = I + Z C Z^T, C = (1 + Sig)^q - 1 (side_basis.h):
//
//   forward:  A = D_out^{-p}, B = D_in^{-p}, H = A X B, T = S_out H S_in,
//             P = H Z_in = A (X (B Z_in)),  Q = Z_out^T H = ((A Z_out)^T X) B,
//             M = Z_out^T P,
//             T = H + [P C_in | Z_out] [Z_in^T ; C_out (Q + M C_in Z_in^T)]
//   inverse:  W^{-1} = D^p S(p): the same bracket with P = X Z_in,
//             Q = Z_out^T X, C = (1 + Sig)^p - 1, and A = D_out^p scaling
//             L's rows, B = D_in^p scaling R's columns.
//
// A side that is absent has rank 0 and a unit diagonal. A side of full rank
// (r = n, Z square) is S(q) = Z (1 + Sig)^q Z^T with no identity term, so
// that C = (1 + Sig)^q and no large cancelling terms are formed in FP32: the
// bracket then loses the parts that the identity produced (with S_out full,
// L = Z_out alone and R = C_out (Q + M C_in Z_in^T); with S_in full, no Q;
// with either, no A X B term). The products cost
// 2 d_out d_in (r_out + r_in) flops each way (the skinny products) plus the
// same again (the update); no n x n matrix is formed.
//
// Precision: all arithmetic is FP32 (the library's accumulation order);
// the error against the double reference is stated in tensor_basis.h.
//
// No argument checks here: TensorBasis checks shapes, pointers and
// finiteness before it calls in.
//
// Thread safety: immutable after construction; Prepare and ApplyRows may
// run concurrently on different LowRankTerm and output buffers.
#ifndef GIFT_COMMON_TRANSFORM_TENSOR_BASIS_FP32_H_
#define GIFT_COMMON_TRANSFORM_TENSOR_BASIS_FP32_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/transform/side_basis.h"

namespace gift::transform {

enum class Direction : uint8_t { kForward = 0, kInverse = 1 };

// L and R of one input X, written by Prepare and read by ApplyRows. The
// caller owns it; reusing one across calls reuses its storage.
struct LowRankTerm {
  Direction direction = Direction::kForward;
  int64_t d_out = 0, d_in = 0, k = 0;
  std::vector<float> l;        // d_out x k, row-major
  std::vector<float> r;        // k x d_in, row-major
  std::vector<float> p;        // d_out x r_in, scratch
  std::vector<float> scratch;  // r_out x r_in
};

class TensorBasisFp32 {
 public:
  // Rounds the sides' parts to FP32 for power p (cost O((d_out + d_in) r)).
  // A side's dimension must be d_out (output) / d_in (input), as
  // TensorBasis::Create checks; at least one side is present.
  TensorBasisFp32(const std::optional<SideBasis>& output_side,
                  const std::optional<SideBasis>& input_side, int64_t d_out, int64_t d_in,
                  double p);

  // Fills `term` for X (d_out x d_in floats, row-major): reads all of X.
  // Returns whether the products over X (P, else Q) are all finite; they
  // are whenever X is (unless they overflow FP32).
  bool Prepare(Direction direction, const float* x, LowRankTerm* term) const;

  // The update runs on fixed blocks of rows [b kRowBlock, (b + 1) kRowBlock)
  // (cut by the range given): one SGEMM each, whose bits OpenBLAS may make
  // depend on the block's height. Ranges that start and end on block bounds
  // (or at d_out) therefore give exactly the bits of the whole range.
  static constexpr int64_t kRowBlock = 256;

  // Rows [row0, row1) of out = A X B + L R, with `x` and `out` the whole
  // d_out x d_in buffers (out == x allowed: each row reads only its own row
  // of x). 0 <= row0 <= row1 <= d_out; term from Prepare on this x.
  // Returns whether every element written is finite (checked per block,
  // while it is in cache).
  bool ApplyRows(const LowRankTerm& term, const float* x, int64_t row0, int64_t row1,
                 float* out) const;

  int64_t d_out() const { return d_out_; }
  int64_t d_in() const { return d_in_; }
  // The depth k of the update (L's columns).
  int64_t k() const { return k_; }

 private:
  // One side, rounded to FP32. Index [d] is the direction.
  struct Side {
    int64_t n = 0, r = 0;                        // r = 0: no such side (identity)
    bool identity = true;                        // S = I + Z C Z^T (r < n); else Z C Z^T
    std::vector<float> z;                        // n x r
    std::array<std::vector<float>, 2> scale;     // n: D^{-p}, D^{p}; empty when r = 0
    std::array<std::vector<float>, 2> core;      // r: (1 + Sig)^{-+p} (- 1 when identity)
    std::array<std::vector<float>, 2> z_scaled;  // n x r: scale[d] rows of z
    std::array<std::vector<float>, 2> zt_post;   // r x n: Z^T, (D^p Z)^T
  };
  bool ApplyBlock(const LowRankTerm& term, const float* x, int64_t row0, int64_t row1,
                  float* out) const;
  static Side MakeSide(const std::optional<SideBasis>& basis, int64_t n, double p);

  int64_t d_out_, d_in_;
  Side out_, in_;
  int64_t k_;           // r_out + (S_out has its identity term ? r_in : 0)
  bool identity_term_;  // both sides have their identity term: the A X B term
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_BASIS_FP32_H_
