// A basis refresh on the GPU: the statistics EMA of a side from device
// gradients, the randomized top eigenpairs of those statistics, and the
// SideBasis / TensorBasis built from them, with cuBLAS and cuSOLVER, so that
// a basis owner needs no CPU pass over the n x n statistics.
//
//   CusolverHandle solver;  CublasHandle blas;         // bound to `stream`
//   RefreshHandles h{stream, blas.get(), solver.get()};
//   auto in = SideStatisticsCuda::Create(d_in, /*decay=*/0.95);
//   GIFT_RETURN_IF_ERROR(in->Update(h, StatisticsSide::kInput, {grad_dev}, d_out, d_in));
//   auto side = SideBasisFromStatisticsCuda(h, *in, rank, side_options);
//
// The same algorithms as the CPU path, in FP32 on the device:
//   - SideStatisticsCuda::Update is SecondMomentEma::Update{Input,Output}Side
//     (second_moment_ema.h): M <- decay M + (1 - decay) mean_i G_i^T G_i /
//     d_out (input side) or G_i G_i^T / d_in (output side), the first update
//     setting M; one cublasSsyrk per gradient (beta = decay on the first, 1
//     after), the lower triangle of a column-major n x n FP32 matrix only.
//   - TopEigenpairsCuda is TopEigenpairs (low_rank_eigen.h): the same seeded
//     Gaussian sketch (GaussianSketch, drawn on the host and uploaded), Y = A
//     Omega (cublasSsymm), `power_iterations` times Q = qr(Y)
//     (cusolverDnSgeqrf + Sorgqr), Y = A Q, a final Q, B = Q^T A Q
//     symmetrized (cublasSgemm, Sgeam), cusolverDnSsyevd of B, the top r Ritz
//     pairs Q V; or, when k = r + oversample >= n, Ssyevd of A itself.
//   - TopEigenpairsCuda's vectors are downloaded, widened to double and
//     re-orthonormalized by one Cholesky QR in double on the host (FP32
//     leaves them orthonormal to ~1e-6 only; SideBasis checks 1e-6); O(n r^2).
//   - SideBasisFromStatisticsCuda / TensorBasisFromStatisticsCuda hand those
//     eigenpairs and the diagonal of A to SideBasis::FromEigenpairs /
//     TensorBasis::Create on the host: O(n r) (isotropic) or O(n r^2)
//     (diagonal model) host work; the O(n^2 k) products and the O(d_out d_in
//     n) statistics stay on the device.
//
// Accuracy: FP32 statistics and FP32 factorizations where the CPU uses
// double. The EMA matches SecondMomentEma within FP32 rounding of its sums
// (relative Frobenius ~1e-6); eigenvalues below ~1e-6 of the largest are
// rounding noise (the CPU's double resolves them), which only matters where
// they fall under the basis's damping floor (1e-3 of the mean eigenvalue by
// default) anyway. The eigenvectors are the CPU's up to sign and rotations
// within clusters of close eigenvalues; tests/kernels/refresh_cuda_test.cc
// compares the statistics, the eigenvalues, the spanned subspaces and the
// resulting TensorBasis's action on a gradient with the CPU path, with the
// tolerances stated there.
//
// Streams and synchronization: everything is enqueued on `handles.stream`
// (both handles must be bound to it; device scratch comes from
// cudaMallocAsync on it). SideStatisticsCuda::Update only enqueues (the
// gradients must stay unchanged until the stream reaches that work);
// TopEigenpairsCuda and the basis builders return host results and
// therefore synchronize the stream.
//
// Errors: InvalidArgument for bad shapes, ranks, options or null pointers,
// and for statistics with a non-finite diagonal (the gradients are not
// scanned on the device: a NaN or Inf gradient element, or FP32 overflow,
// makes its column's diagonal non-finite, which the eigen step reports; the
// EMA then stays poisoned until Reset). FailedPrecondition without a CUDA
// device (from Create) and for zero statistics (no trace: from the basis
// builders, as on the CPU). Internal for CUDA, cuBLAS or cuSOLVER failures,
// including a cuSOLVER devInfo != 0.
//
// Ownership and thread safety: SideStatisticsCuda owns its device matrix;
// the handles and the stream are the caller's and must outlive each call.
// A SideStatisticsCuda and a set of handles are used from one thread at a
// time (as cuBLAS and cuSOLVER require); the free functions are reentrant
// given distinct handles. Host code, C++17; nothing needs a GPU at build
// time.
#ifndef GIFT_KERNELS_TRANSFORM_REFRESH_CUDA_H_
#define GIFT_KERNELS_TRANSFORM_REFRESH_CUDA_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <Eigen/Dense>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/unique_handle.h"
#include "common/transform/low_rank_eigen.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"

namespace gift::kernels {

absl::Status CusolverStatus(cusolverStatus_t st, const char* what);

// Owns a cuSOLVER dense handle (destroyed with the owner); movable.
class CusolverHandle {
 public:
  // Creates the handle and binds it to `stream`. Internal on failure.
  absl::Status Init(cudaStream_t stream);
  cusolverDnHandle_t get() const { return h_.get(); }

 private:
  UniqueHandle<cusolverDnHandle_t, cusolverDnDestroy> h_;
};

// The caller's stream and handles, both bound to that stream (not owned).
struct RefreshHandles {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cusolverDnHandle_t cusolver = nullptr;
};

enum class StatisticsSide {
  kInput,   // G^T G / d_out, n = d_in
  kOutput,  // G G^T / d_in,  n = d_out
};

// The EMA of one side's second moment, n x n FP32 on the device.
class SideStatisticsCuda {
 public:
  // FailedPrecondition without a CUDA device; InvalidArgument unless n >= 1
  // (and fits an int) and 0 <= decay < 1; Internal when the allocation fails.
  static absl::StatusOr<SideStatisticsCuda> Create(int64_t n, double decay);

  SideStatisticsCuda(SideStatisticsCuda&&) noexcept;
  SideStatisticsCuda& operator=(SideStatisticsCuda&&) noexcept;
  SideStatisticsCuda(const SideStatisticsCuda&) = delete;
  SideStatisticsCuda& operator=(const SideStatisticsCuda&) = delete;
  ~SideStatisticsCuda();

  // Folds the mean over `grads` (device pointers to d_out x d_in row-major
  // FP32 gradients, not owned, read by the enqueued work) into the average,
  // as SecondMomentEma does. Requires n == d_in (kInput) or n == d_out
  // (kOutput): InvalidArgument otherwise, for no or a null gradient, or a
  // dimension over INT_MAX. Enqueued, not waited for.
  absl::Status Update(const RefreshHandles& handles, StatisticsSide side,
                      absl::Span<const float* const> grads, int64_t d_out, int64_t d_in);

  // Forgets every update (the next one sets the average).
  void Reset() { num_updates_ = 0; }

  int64_t dim() const { return n_; }
  double decay() const { return decay_; }
  int64_t num_updates() const { return num_updates_; }
  // The average: column-major n x n device matrix, lower triangle only
  // (what Ssymm / Ssyevd read with CUBLAS_FILL_MODE_LOWER). Owned by this
  // object; valid once the enqueued updates are done.
  const float* device_value() const { return value_; }

  // The average, mirrored to a full symmetric matrix and widened to double
  // (for tests and diagnostics). Synchronizes the stream.
  absl::StatusOr<Eigen::MatrixXd> Download(const RefreshHandles& handles) const;

 private:
  SideStatisticsCuda(int64_t n, double decay, float* value) : n_(n), decay_(decay), value_(value) {}

  int64_t n_ = 0;
  double decay_ = 0.0;
  int64_t num_updates_ = 0;
  float* value_ = nullptr;  // owned, cudaMalloc
};

// The top `rank` eigenpairs of the symmetric n x n device matrix `a`
// (column-major, lower triangle read; not modified), with its trace, as
// TopEigenpairs computes them on the CPU (header comment). When `diagonal`
// is not null it receives the n diagonal values of `a`. InvalidArgument
// for a null `a`, n < 1 or over INT_MAX, rank outside [1, n], negative
// options, or a non-finite diagonal. Synchronizes the stream.
absl::StatusOr<transform::LowRankEigenpairs> TopEigenpairsCuda(
    const RefreshHandles& handles, const float* a, int64_t n, int64_t rank,
    const transform::LowRankEigenOptions& options = {}, Eigen::VectorXd* diagonal = nullptr);

// SideBasis::FromFactor of the statistics (as the CPU builds it from
// SecondMomentEma::value()), with its eigenpairs from TopEigenpairsCuda.
// FailedPrecondition before the first update or for zero statistics.
absl::StatusOr<transform::SideBasis> SideBasisFromStatisticsCuda(
    const RefreshHandles& handles, const SideStatisticsCuda& statistics, int64_t rank,
    const transform::SideBasisOptions& options = {},
    const transform::LowRankEigenOptions& eigen_options = {});

// A TensorBasis of `header` whose present sides (header.config.sides) come
// from the statistics given for them: `output` of dimension d_out, `input`
// of dimension d_in, each non-null exactly when its side is present
// (InvalidArgument otherwise); each side's rank is min(rank, its dimension).
absl::StatusOr<transform::TensorBasis> TensorBasisFromStatisticsCuda(
    const RefreshHandles& handles, const transform::TensorBasisHeader& header,
    const SideStatisticsCuda* output, const SideStatisticsCuda* input, int64_t rank,
    const transform::SideBasisOptions& options = {},
    const transform::LowRankEigenOptions& eigen_options = {});

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_TRANSFORM_REFRESH_CUDA_H_
