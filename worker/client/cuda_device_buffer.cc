#include "worker/client/cuda_device_buffer.h"

#include <cuda.h>  // driver types only; nothing links libcuda
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda_driver.h"

namespace gift::client {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);

bool NoDevice(cudaError_t err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
         err == cudaErrorInitializationError || err == cudaErrorCompatNotSupportedOnDevice;
}

}  // namespace

absl::StatusOr<DeviceBuffer> DescribeDeviceBuffer(const void* address, size_t size_bytes) {
  if (address == nullptr || size_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("DescribeDeviceBuffer: an empty range (",
                                                   address == nullptr ? "null address" : "0 bytes",
                                                   ")"));
  }
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // leave no error behind
    return absl::FailedPreconditionError(
        absl::StrCat("DescribeDeviceBuffer: no CUDA device (",
                     err != cudaSuccess ? kernels::CudaErrorText(err) : "0 devices",
                     "); register host tensors"));
  }
  cudaPointerAttributes attributes{};
  if (const cudaError_t err = cudaPointerGetAttributes(&attributes, address); err != cudaSuccess) {
    (void)cudaGetLastError();
    if (NoDevice(err)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DescribeDeviceBuffer: no usable CUDA device: ", kernels::CudaErrorText(err)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("DescribeDeviceBuffer: not a CUDA address: ", kernels::CudaErrorText(err)));
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
      break;
    case cudaMemoryTypeManaged:
      return absl::InvalidArgumentError(
          "DescribeDeviceBuffer: managed memory (cudaMallocManaged), which CUDA IPC cannot "
          "export; allocate the tensor with cudaMalloc or register it as a host tensor");
    default:
      return absl::InvalidArgumentError(
          "DescribeDeviceBuffer: host memory, not device memory; register it as a host tensor");
  }
  kernels::CudaDeviceScope scope(attributes.device);
  if (scope.error() != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("DescribeDeviceBuffer: cudaSetDevice(", attributes.device,
                     "): ", kernels::CudaErrorText(scope.error())));
  }
  absl::StatusOr<kernels::CuMemGetAddressRange> address_range =
      kernels::FindAddressRange("DescribeDeviceBuffer");
  if (!address_range.ok()) return address_range.status();
  CUdeviceptr base = 0;
  size_t allocation = 0;
  const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(address);
  if (const CUresult r = (*address_range)(&base, &allocation, ptr); r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DescribeDeviceBuffer: cuMemGetAddressRange refused the address (CUresult ", r, ")"));
  }
  const uint64_t offset = ptr - base;
  if (size_bytes > allocation - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("DescribeDeviceBuffer: [+", offset, ", +", offset + size_bytes,
                     ") runs past the end of its allocation of ", allocation, " bytes"));
  }
  cudaIpcMemHandle_t handle;
  if (const cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
      err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("DescribeDeviceBuffer: cudaIpcGetMemHandle refused the allocation: ",
                     kernels::CudaErrorText(err)));
  }
  DeviceBuffer buffer;
  buffer.ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  buffer.device = attributes.device;
  buffer.offset_bytes = offset;
  buffer.size_bytes = size_bytes;
  buffer.address = const_cast<void*>(address);
  return buffer;
}

}  // namespace gift::client
