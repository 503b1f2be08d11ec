#include "worker/cuda/cuda_ipc_buffers.h"

#include <cuda.h>  // driver types only; nothing links libcuda (kernels/cuda_driver.h)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_driver.h"

namespace gift::worker {

using kernels::CudaDeviceScope;
using kernels::CudaErrorText;

absl::StatusOr<std::unique_ptr<CudaIpcBuffers>> CudaIpcBuffers::Create() {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // leave no error behind
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA IPC buffers need a CUDA device, and this worker has none (",
        err != cudaSuccess ? CudaErrorText(err) : "0 devices", "); register host buffers"));
  }
  absl::StatusOr<kernels::CuMemGetAddressRange> address_range =
      kernels::FindAddressRange("CudaIpcBuffers");
  if (!address_range.ok()) return address_range.status();
  return std::unique_ptr<CudaIpcBuffers>(
      new CudaIpcBuffers(reinterpret_cast<void*>(*address_range)));
}

CudaIpcBuffers::~CudaIpcBuffers() {
  for (auto& [key, m] : mappings_) {
    CudaDeviceScope scope(m.device);
    (void)cudaIpcCloseMemHandle(m.base);
  }
}

absl::StatusOr<void*> CudaIpcBuffers::Open(absl::string_view handle, int device, uint64_t offset,
                                           uint64_t size) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda_ipc_handle of ", handle.size(),
                                                   " bytes; a cudaIpcMemHandle_t has ",
                                                   sizeof(cudaIpcMemHandle_t)));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_device ", device, " out of range (", count, " devices)"));
  }
  std::string key = absl::StrCat(device, ":", handle);
  auto it = mappings_.find(key);
  if (it == mappings_.end()) {
    CudaDeviceScope scope(device);
    if (scope.error() != cudaSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("cudaSetDevice(", device, "): ", CudaErrorText(scope.error())));
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    void* base = nullptr;
    if (const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
        err != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::FailedPreconditionError(
          absl::StrCat("cudaIpcOpenMemHandle refused the handle: ", CudaErrorText(err)));
    }
    CUdeviceptr range_base = 0;
    size_t range_size = 0;
    const CUresult r = reinterpret_cast<kernels::CuMemGetAddressRange>(address_range_)(
        &range_base, &range_size, reinterpret_cast<CUdeviceptr>(base));
    if (r != CUDA_SUCCESS || range_base != reinterpret_cast<CUdeviceptr>(base)) {
      (void)cudaIpcCloseMemHandle(base);
      return absl::FailedPreconditionError(
          absl::StrCat("cuMemGetAddressRange of the opened handle failed (CUresult ", r, ")"));
    }
    it = mappings_.emplace(std::move(key), Mapping{device, base, range_size}).first;
  }
  const Mapping& m = it->second;
  if (offset > m.size || size > m.size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "range [", offset, ", +", size, ") outside the exported allocation of ", m.size, " bytes"));
  }
  return static_cast<char*>(m.base) + offset;
}

}  // namespace gift::worker
