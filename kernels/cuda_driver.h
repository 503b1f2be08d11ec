// What the worker and the client need of the CUDA driver beyond the runtime,
// reached through the runtime's driver entry points so that nothing links
// libcuda (a binary built with CUDA still starts where no driver is
// installed), and the device scope both use around their calls. Host code;
// include only where CUDA is built. The one definition of each for
// worker/cuda/cuda_ipc_buffers.cc and worker/client/cuda_device_buffer.cc.
//
// Thread safety: CudaDeviceScope changes the calling thread's current device
// for its lifetime; FindAddressRange and CudaErrorText are safe anywhere.
#ifndef GIFT_KERNELS_CUDA_DRIVER_H_
#define GIFT_KERNELS_CUDA_DRIVER_H_

#include <cuda.h>  // driver types only
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gift::kernels {

// "NAME: description" of a runtime error.
inline std::string CudaErrorText(cudaError_t err) {
  return absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

// Makes `device` current for the object's lifetime and restores the thread's
// previous one (the process may use other devices elsewhere). error() is
// cudaSetDevice's answer.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    error_ = cudaSetDevice(device);
  }
  ~CudaDeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// The driver's cuMemGetAddressRange: the base and size of the allocation
// holding a device address.
using CuMemGetAddressRange = CUresult(CUDAAPI*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);

// Finds it through cudaGetDriverEntryPointByVersion (CUDA 12 ABI). Internal,
// naming `who`, when the driver has none; the runtime's error is cleared.
inline absl::StatusOr<CuMemGetAddressRange> FindAddressRange(absl::string_view who) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (const cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                               cudaEnableDefault, &found);
      err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    return absl::InternalError(absl::StrCat(who, ": the driver has no cuMemGetAddressRange"));
  }
  return reinterpret_cast<CuMemGetAddressRange>(fn);
}

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_CUDA_DRIVER_H_
