// cuBLAS errors as absl::Status, and an owner of a cuBLAS handle bound to a
// stream: shared by the CUDA transform (transform_cuda.cc) and gift-bench's
// GPU transform bench. Host code; include only where CUDA is built.
//
// Thread safety: a handle is used from one thread at a time (as cuBLAS
// requires); CublasStatus is reentrant.
#ifndef GIFT_KERNELS_TRANSFORM_CUBLAS_HANDLE_H_
#define GIFT_KERNELS_TRANSFORM_CUBLAS_HANDLE_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/unique_handle.h"

namespace gift::kernels {

inline absl::Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(st), ": ",
                                          cublasGetStatusString(st)));
}

// Owns a cuBLAS handle (destroyed with the owner); movable.
class CublasHandle {
 public:
  // Creates the handle and binds it to `stream`.
  absl::Status Init(cudaStream_t stream) {
    GIFT_RETURN_IF_ERROR(CublasStatus(cublasCreate(h_.put()), "cublasCreate"));
    return CublasStatus(cublasSetStream(h_.get(), stream), "cublasSetStream");
  }
  cublasHandle_t get() const { return h_.get(); }

 private:
  UniqueHandle<cublasHandle_t, cublasDestroy> h_;
};

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_TRANSFORM_CUBLAS_HANDLE_H_
