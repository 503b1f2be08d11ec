// The few cuSOLVER dense functions the GPU refresh (kernels/transform/
// refresh_cuda.cc) calls, emulated on the host with Eigen in FP32 for the
// emulated test binary, as cublas_host_emulation.cc does for cuBLAS:
// handles are plain structs, streams are ignored (every call completes
// before it returns), device pointers are host pointers
// (cuda_host_emulation_runtime.cc).
//
//   geqrf: Householder QR in LAPACK's layout (R on and above the diagonal,
//          the reflectors' essential parts below it, tau; Eigen's
//          HouseholderQR uses the same convention).
//   orgqr: the first n columns of H_1 ... H_k.
//   syevd: the eigenvalues ascending and orthonormal eigenvectors of the
//          `uplo` triangle (Eigen's SelfAdjointEigenSolver).
// The *_bufferSize functions answer a workspace size; each call checks the
// caller's Lwork against it and its other arguments as cuSOLVER does
// (CUSOLVER_STATUS_INVALID_VALUE), and writes devInfo = 0 on success.
//
// It checks the caller's call sequence (shapes, leading dimensions,
// workspace queries, devInfo) and gives the factorizations FP32 rounding;
// it says nothing about cuSOLVER's own kernels. Test-only.
#include <cusolverDn.h>

#include <Eigen/Dense>
#include <algorithm>

struct cusolverDnContext {
  cudaStream_t stream = nullptr;
};

namespace {

using Strided = Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>>;

// The workspace every call asks for (floats): enough for none of them to
// need more, small enough to be cheap.
int Workspace(int m, int n) { return std::max({1, m, n}); }

}  // namespace

extern "C" {

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* handle) {
  *handle = new cusolverDnContext;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t handle) {
  delete handle;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSgeqrf_bufferSize(cusolverDnHandle_t handle, int m, int n, float* /*a*/,
                                             int lda, int* lwork) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || lda < std::max(1, m)) return CUSOLVER_STATUS_INVALID_VALUE;
  *lwork = Workspace(m, n);
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSgeqrf(cusolverDnHandle_t handle, int m, int n, float* a, int lda,
                                  float* tau, float* work, int lwork, int* dev_info) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || lda < std::max(1, m) || work == nullptr || lwork < Workspace(m, n)) {
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  Strided map(a, m, n, Eigen::OuterStride<>(lda));
  const Eigen::HouseholderQR<Eigen::MatrixXf> qr(map);
  map = qr.matrixQR();
  for (int i = 0; i < std::min(m, n); ++i) tau[i] = qr.hCoeffs()(i);
  *dev_info = 0;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSorgqr_bufferSize(cusolverDnHandle_t handle, int m, int n, int k,
                                             const float* /*a*/, int lda, const float* /*tau*/,
                                             int* lwork) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || n > m || k < 0 || k > n || lda < std::max(1, m)) {
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  *lwork = Workspace(m, n);
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSorgqr(cusolverDnHandle_t handle, int m, int n, int k, float* a, int lda,
                                  const float* tau, float* work, int lwork, int* info) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || n > m || k < 0 || k > n || lda < std::max(1, m) || work == nullptr ||
      lwork < Workspace(m, n)) {
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  Strided map(a, m, n, Eigen::OuterStride<>(lda));
  const Eigen::MatrixXf vectors = map.leftCols(k);
  const Eigen::VectorXf coeffs = Eigen::Map<const Eigen::VectorXf>(tau, k);
  const Eigen::HouseholderSequence<Eigen::MatrixXf, Eigen::VectorXf> h(vectors, coeffs);
  map = h * Eigen::MatrixXf::Identity(m, n);
  *info = 0;
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSsyevd_bufferSize(cusolverDnHandle_t handle, cusolverEigMode_t jobz,
                                             cublasFillMode_t uplo, int n, const float* /*a*/,
                                             int lda, const float* /*w*/, int* lwork) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n) || jobz != CUSOLVER_EIG_MODE_VECTOR ||
      (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER)) {
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  *lwork = Workspace(n, n);
  return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSsyevd(cusolverDnHandle_t handle, cusolverEigMode_t jobz,
                                  cublasFillMode_t uplo, int n, float* a, int lda, float* w,
                                  float* work, int lwork, int* info) {
  if (handle == nullptr) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n) || jobz != CUSOLVER_EIG_MODE_VECTOR ||
      (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || work == nullptr ||
      lwork < Workspace(n, n)) {
    return CUSOLVER_STATUS_INVALID_VALUE;
  }
  Strided map(a, n, n, Eigen::OuterStride<>(lda));
  // SelfAdjointEigenSolver reads the lower triangle: an upper one is
  // transposed into it first. Nothing outside the triangle is read.
  Eigen::MatrixXf lower(n, n);
  lower.triangularView<Eigen::Lower>() =
      uplo == CUBLAS_FILL_MODE_LOWER ? Eigen::MatrixXf(map) : Eigen::MatrixXf(map.transpose());
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXf> eig(lower);
  if (eig.info() != Eigen::Success) {
    *info = 1;  // no convergence, as LAPACK reports it (info > 0)
    return CUSOLVER_STATUS_SUCCESS;
  }
  map = eig.eigenvectors();
  for (int i = 0; i < n; ++i) w[i] = eig.eigenvalues()(i);
  *info = 0;
  return CUSOLVER_STATUS_SUCCESS;
}

}  // extern "C"
