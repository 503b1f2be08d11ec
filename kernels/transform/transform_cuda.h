// The geometry-aware transform of a TensorBasis (common/transform/
// tensor_basis.h) on the GPU: T(G) = W_out G W_in^T and its exact inverse on
// device buffers (row-major FP32 d_out x d_in), in O(d_out d_in r) with
// cuBLAS skinny GEMMs, no n x n matrix and no triangular solve.
//
// Each side's operator is a diagonal plus a rank-r term, W^T = diag(s) +
// A1 A2^T on the input side and W = diag(s) + A2 A1^T on the output side
// (forward: s = D^{-p}, A1 = D^{-p} Z, A2 = Z diag((1+Sig)^{-p} - 1);
// inverse: s = D^p, A1 = Z, A2 = D^p Z diag((1+Sig)^p - 1)), built in
// double on the host from the basis's parts and uploaded as FP32. Both sides
// are applied together, in the combined form
//   T(G) = diag(s_o) G diag(s_i) + [diag(s_o) P] A2_i^T + A2_o [Q diag(s_i) + K A2_i^T]
//   P = G A1_i (d_out x r_i),  Q = A1_o^T G (r_o x d_in),  K = A1_o^T P (r_o x r_i),
// i.e. two skinny GEMMs that read G, small r-sized work, one pass that
// scales G by both diagonals at once (the one custom kernel,
// transform_kernels.cu), and one GEMM of inner dimension r_i + r_o that adds
// the low-rank terms in place: 6 passes over the tensor's bytes, against 10
// for one side after the other. A side not enabled drops its terms.
//
// Forward and Inverse do not encode: the transformed tensor is written to
// `out` and encoded by EncodeCuda (kernels/codec/codec_cuda.h) as a separate
// pass. ForwardLowRank / InverseLowRank stop before the last two steps and
// hand the low-rank terms to a consumer that applies them itself:
// forward_encode_cuda.h fuses the scaling and the rank-k update with the
// codec's block amax, scale and encode.
//
// Precision: FP32 operands and FP32 accumulation in cuBLAS (kFp32), or
// TF32 tensor-core products with FP32 accumulation (kTf32, ~1e-3 relative
// on the low-rank terms: below FP8 and FP4 quantization error by orders of
// magnitude, not below FP32 rounding). cuBLAS's order of summation differs
// from the CPU's double-precision TensorBasis, so the results are not
// bit-identical; tests/kernels/transform_cuda_test.cc checks kFp32 against
// the CPU within 1e-5 relative Frobenius error (and the GPU forward ->
// inverse round trip within 1e-5), kTf32 within 5e-3. The identity-plus-
// low-rank form cancels: with kappa = prod over sides of max (1+Sig)^p the
// FP32 error grows to about kappa ulps (1e-7 * kappa is tested), which only
// matters for rank = n with the residual at the damping floor and p = 1/2
// (kappa ~ 1e4 in the tests); the CPU's double arithmetic hides it.
//
// Asynchronous: Forward and Inverse enqueue on the object's stream and
// return without waiting; launch errors come back as Status, errors of the
// running work surface at the caller's next synchronization. The data is NOT
// scanned for NaN/Inf (that would cost a pass and a synchronization): they
// propagate into the output, where EncodeCuda reports them as
// InvalidArgument; nor is FP32 overflow of the result reported.
//
// Ownership and thread safety: the object owns its device memory (basis
// matrices and the d x r workspace) and its cuBLAS handle; it does NOT own
// the stream given at creation, which must outlive it. Calls on one object
// are not thread-safe and must be ordered by the caller: use one object per
// stream (the workspace is reused from call to call, which is safe because
// the stream orders the calls). Buffers passed to Forward / Inverse must not
// be written by other streams until the work is done.
//
// Nothing here needs a GPU at build time; at run time Create returns
// FailedPrecondition when no CUDA device is present. C++17.
#ifndef GIFT_KERNELS_TRANSFORM_TRANSFORM_CUDA_H_
#define GIFT_KERNELS_TRANSFORM_TRANSFORM_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gift::transform {
class TensorBasis;
}  // namespace gift::transform

namespace gift::kernels {

// How cuBLAS multiplies (see the file comment for the accuracy of each).
enum class TransformMath {
  kFp32,  // CUBLAS_COMPUTE_32F
  kTf32,  // CUBLAS_COMPUTE_32F_FAST_TF32
};

class TensorBasisCuda {
 public:
  // Uploads `basis` (not referenced afterwards) for use on `stream` (not
  // owned; may be null, the legacy default stream). FailedPrecondition
  // without a CUDA device; Internal on a CUDA or cuBLAS failure (no memory,
  // ...).
  static absl::StatusOr<TensorBasisCuda> Create(const transform::TensorBasis& basis,
                                                cudaStream_t stream,
                                                TransformMath math = TransformMath::kFp32);

  TensorBasisCuda(TensorBasisCuda&&) noexcept;
  TensorBasisCuda& operator=(TensorBasisCuda&&) noexcept;
  ~TensorBasisCuda();

  // out = T(g) (Forward) or T^{-1}(x) (Inverse): device buffers of d_out x
  // d_in floats; `out` may equal the input (in place) but must not otherwise
  // overlap it. InvalidArgument for a shape other than the basis's or a null
  // buffer; Internal for a CUDA or cuBLAS error. Enqueued on the stream, not
  // waited for (see above).
  absl::Status Forward(const float* g, int64_t d_out, int64_t d_in, float* out);
  absl::Status Inverse(const float* x, int64_t d_out, int64_t d_in, float* out);

  // The transform up to its last two steps, for a consumer that finishes it
  // itself (forward_encode_cuda.h):
  //   T(g)[i][j] = (g[i][j] * s_out[i]) * s_in[j]
  //                + sum_{t < k} left[j + t d_in] * right[i + t d_out]
  // (row-major i < d_out, j < d_in; a null scale stands for ones). The GEMMs
  // are enqueued on the stream, not waited for; the pointers are device
  // memory owned by this object, complete once the enqueued work is, and
  // valid until the next call on it (any of Forward, Inverse, *LowRank).
  // Same errors as Forward (the input's shape and null-ness are checked).
  struct LowRankTerms {
    const float* s_out = nullptr;  // d_out values, or null (no output side)
    const float* s_in = nullptr;   // d_in values, or null (no input side)
    const float* left = nullptr;   // L: d_in x k, column-major (leading dimension d_in)
    const float* right = nullptr;  // R: d_out x k, column-major (leading dimension d_out)
    int k = 0;                     // r_in + r_out
  };
  absl::StatusOr<LowRankTerms> ForwardLowRank(const float* g, int64_t d_out, int64_t d_in);
  absl::StatusOr<LowRankTerms> InverseLowRank(const float* x, int64_t d_out, int64_t d_in);

  int64_t d_out() const;
  int64_t d_in() const;
  cudaStream_t stream() const;

 private:
  struct Impl;
  explicit TensorBasisCuda(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_TRANSFORM_TRANSFORM_CUDA_H_
