#include "worker/cuda/cuda_device_memory.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::worker {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);

absl::Status Copy(void* dst, const void* src, uint64_t bytes, const char* what) {
  if (bytes == 0) return absl::OkStatus();
  const cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // leave no error behind
  return absl::InternalError(absl::StrCat(what, " of ", bytes, " bytes: ", cudaGetErrorName(err),
                                          ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> CudaDeviceMemory::Create() {
  auto buffers = CudaIpcBuffers::Create();
  if (!buffers.ok()) {
    if (buffers.status().code() != absl::StatusCode::kFailedPrecondition) return buffers.status();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", buffers.status().message()));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device");
  }
  return std::unique_ptr<CudaDeviceMemory>(new CudaDeviceMemory(*std::move(buffers), count));
}

absl::StatusOr<void*> CudaDeviceMemory::Open(absl::string_view handle, int device, uint64_t offset,
                                             uint64_t size) {
  absl::MutexLock lock(&mu_);
  return buffers_->Open(handle, device, offset, size);
}

absl::Status CudaDeviceMemory::CopyToHost(void* host_dst, const void* device_src,
                                          uint64_t bytes) const {
  return Copy(host_dst, device_src, bytes, "device-to-host copy");
}

absl::Status CudaDeviceMemory::CopyToDevice(void* device_dst, const void* host_src,
                                            uint64_t bytes) const {
  return Copy(device_dst, host_src, bytes, "host-to-device copy");
}

}  // namespace gift::worker
