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
// It checks the transform's call sequence (shapes, transposes, leading
// dimensions, buffer offsets) and gives its FP32 error a realistic size;
// it says nothing about cuBLAS's own kernels. Test-only.
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
  const int a_rows = transa == CUBLAS_OP_N ? m : k;
  const int b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < (a_rows > 1 ? a_rows : 1) ||
      ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const float al = *static_cast<const float*>(alpha);
  const float be = *static_cast<const float*>(beta);
  const float* fa = static_cast<const float*>(a);
  const float* fb = static_cast<const float*>(b);
  float* fc = static_cast<float*>(c);
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
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
