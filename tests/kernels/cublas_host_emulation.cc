// The few cuBLAS functions the CUDA transform (kernels/transform/
// transform_cuda.cc) calls, emulated on the host for the emulated test
// binary (see cuda_host_emulation_runtime.cc): handles are plain structs,
// streams are ignored (every call completes before it returns), and
// cublasGemmEx is the textbook column-major product
//   C = alpha op(A) op(B) + beta C   (C not read when beta == 0)
// with FP32 operands summed in FP32 in order of the inner index. With
// CUBLAS_COMPUTE_32F_FAST_TF32 the operands are first rounded to TF32 (10
// stored mantissa bits, to nearest even), as the tensor cores read them.
//
// The refresh (kernels/transform/refresh_cuda.cc) adds cublasSgemm (the
// same product), cublasSsyrk and cublasSsymm (one triangle of the symmetric
// matrix written / read, FP32 sums in order of the inner index, C not read
// when beta == 0), cublasSgeam and cublasScopy.
//
// It checks the callers' call sequences (shapes, transposes, triangles,
// leading dimensions, buffer offsets) and gives their FP32 error a realistic
// size; it says nothing about cuBLAS's own kernels. Test-only.
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float RoundToTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7F800000u) != 0x7F800000u) {  // finite: round the low 13 bits away, ties to even
    u += 0xFFFu + ((u >> 13) & 1u);
    u &= ~0x1FFFu;
  }
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Element (i, j) of op(X), X column-major with leading dimension ld.
float At(const float* x, int ld, cublasOperation_t op, int i, int j) {
  return op == CUBLAS_OP_N ? x[i + static_cast<int64_t>(j) * ld]
                           : x[j + static_cast<int64_t>(i) * ld];
}

// C = alpha op(A) op(B) + beta C (column-major; C not read when beta == 0),
// FP32 sums in order of the inner index; operands rounded to TF32 first
// when `tf32`.
void Gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, float al,
          const float* fa, int lda, const float* fb, int ldb, float be, float* fc, int ldc,
          bool tf32) {
  std::vector<float> col(k);
  for (int j = 0; j < n; ++j) {
    for (int p = 0; p < k; ++p) {
      const float v = At(fb, ldb, transb, p, j);
      col[p] = tf32 ? RoundToTf32(v) : v;
    }
    for (int i = 0; i < m; ++i) {
      float sum = 0.0f;
      for (int p = 0; p < k; ++p) {
        const float v = At(fa, lda, transa, i, p);
        sum += (tf32 ? RoundToTf32(v) : v) * col[p];
      }
      float& out = fc[i + static_cast<int64_t>(j) * ldc];
      out = be == 0.0f ? al * sum : al * sum + be * out;
    }
  }
}

bool BadGemmShape(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                  int lda, int ldb, int ldc) {
  const int a_rows = transa == CUBLAS_OP_N ? m : k;
  const int b_rows = transb == CUBLAS_OP_N ? k : n;
  return m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) ||
         ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// The math mode is accepted and ignored: cublasSgemm_v2 below computes in
// FP32 whatever the mode.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t /*mode*/) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_EMULATED";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t /*algo*/) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (a_type != CUDA_R_32F || b_type != CUDA_R_32F || c_type != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (BadGemmShape(transa, transb, m, n, k, lda, ldb, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
  Gemm(transa, transb, m, n, k, *static_cast<const float*>(alpha), static_cast<const float*>(a),
       lda, static_cast<const float*>(b), ldb, *static_cast<const float*>(beta),
       static_cast<float*>(c), ldc, compute == CUBLAS_COMPUTE_32F_FAST_TF32);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (BadGemmShape(transa, transb, m, n, k, lda, ldb, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
  Gemm(transa, transb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc, /*tf32=*/false);
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(A)^T + beta C on C's `uplo` triangle only (n x n);
// op(A) is n x k.
cublasStatus_t cublasSsyrk_v2(cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans,
                              int n, int k, const float* alpha, const float* a, int lda,
                              const float* beta, float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int a_rows = trans == CUBLAS_OP_N ? n : k;
  if (n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) || ldc < (n > 1 ? n : 1) ||
      (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool lower = uplo == CUBLAS_FILL_MODE_LOWER;
  std::vector<float> col(k);
  for (int j = 0; j < n; ++j) {
    for (int p = 0; p < k; ++p) col[p] = At(a, lda, trans, j, p);
    for (int i = lower ? j : 0; i < (lower ? n : j + 1); ++i) {
      float sum = 0.0f;
      for (int p = 0; p < k; ++p) sum += At(a, lda, trans, i, p) * col[p];
      float& out = c[i + static_cast<int64_t>(j) * ldc];
      out = *beta == 0.0f ? *alpha * sum : *alpha * sum + *beta * out;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha A B + beta C (side left; A m x m symmetric, read from its
// `uplo` triangle only) or alpha B A + beta C (side right; A n x n).
cublasStatus_t cublasSsymm_v2(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                              int m, int n, const float* alpha, const float* a, int lda,
                              const float* b, int ldb, const float* beta, float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int order = side == CUBLAS_SIDE_LEFT ? m : n;
  if (m < 0 || n < 0 || lda < (order > 1 ? order : 1) || ldb < (m > 1 ? m : 1) ||
      ldc < (m > 1 ? m : 1) || (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The full symmetric matrix from the triangle, then the plain product.
  std::vector<float> full(static_cast<size_t>(order) * order);
  const bool lower = uplo == CUBLAS_FILL_MODE_LOWER;
  for (int j = 0; j < order; ++j) {
    for (int i = 0; i < order; ++i) {
      const bool stored = lower ? i >= j : i <= j;
      full[i + static_cast<size_t>(j) * order] =
          stored ? a[i + static_cast<int64_t>(j) * lda] : a[j + static_cast<int64_t>(i) * lda];
    }
  }
  if (side == CUBLAS_SIDE_LEFT) {
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, m, *alpha, full.data(), order, b, ldb, *beta, c, ldc,
         false);
  } else {
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, n, *alpha, b, ldb, full.data(), order, *beta, c, ldc,
         false);
  }
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) + beta op(B), m x n (B not read when beta == 0), staged
// through a host copy. (cuBLAS allows C to alias A or B only untransposed;
// the callers here never alias.)
cublasStatus_t cublasSgeam(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, const float* alpha,
                           const float* a, int lda, const float* beta, const float* b, int ldb,
                           float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int a_rows = transa == CUBLAS_OP_N ? m : n;
  const int b_rows = transb == CUBLAS_OP_N ? m : n;
  if (m < 0 || n < 0 || lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) ||
      ldc < (m > 1 ? m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::vector<float> out(static_cast<size_t>(m) * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float v = *alpha * At(a, lda, transa, i, j);
      if (*beta != 0.0f) v += *beta * At(b, ldb, transb, i, j);
      out[i + static_cast<size_t>(j) * m] = v;
    }
  }
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) c[i + static_cast<int64_t>(j) * ldc] = out[i + static_cast<size_t>(j) * m];
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasScopy_v2(cublasHandle_t handle, int n, const float* x, int incx, float* y,
                              int incy) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (incx <= 0 || incy <= 0) return CUBLAS_STATUS_NOT_SUPPORTED;  // not needed by the callers
  for (int i = 0; i < n; ++i) y[static_cast<int64_t>(i) * incy] = x[static_cast<int64_t>(i) * incx];
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
