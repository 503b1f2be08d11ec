// CUDA runtime errors as absl::Status, and whether this process has a CUDA
// device: the one definition of each that the kernels' host code, the
// worker's device code and the GPU benches use. Host code; include only where
// CUDA is built (or over the tests' host emulation of the runtime).
//
// Thread safety: both are safe to call from any thread.
#ifndef GIFT_KERNELS_CUDA_STATUS_H_
#define GIFT_KERNELS_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gift::kernels {

// OK for cudaSuccess, else Internal "what: CUDA error NAME: description".
inline absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Whether a CUDA device can be used. Cached: the device set of a process does
// not change. cudaGetDeviceCount fails (without aborting) when there is no
// driver or no device; the error is cleared so that later checks do not see it.
inline bool CudaDeviceAvailable() {
  static const bool available = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return available;
}

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_CUDA_STATUS_H_
