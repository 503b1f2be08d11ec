// Describes a tensor in CUDA device memory for WorkerClient::Register
// (device_tensor.h): the cudaIpcMemHandle_t of the allocation holding it,
// its device and its offset from the allocation's base.
//
//   float* grad;  cudaMalloc(&grad, bytes);
//   absl::StatusOr<DeviceBuffer> b = DescribeDeviceBuffer(grad, bytes);
//   DeviceTensorSpec spec{"w", {rows, cols}, gift::v1::DTYPE_FLOAT32, *b};
//
// A library of its own (gift_worker_client_cuda), built only with CUDA, so
// that gift_worker_client stays free of it. It links the static CUDA runtime
// and finds the driver's cuMemGetAddressRange through the runtime's driver
// entry points: nothing links libcuda, and a binary starts (and answers
// FailedPrecondition) on a machine without a device.
//
// Thread safety: may be called from any thread; it sets the pointer's device
// current for the call and restores the thread's previous device.
#ifndef GIFT_WORKER_CLIENT_CUDA_DEVICE_BUFFER_H_
#define GIFT_WORKER_CLIENT_CUDA_DEVICE_BUFFER_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "worker/client/device_tensor.h"

namespace gift::client {

// The description of [address, address + size_bytes), which must lie in one
// cudaMalloc allocation (a caching allocator's sub-block is fine: the offset
// is from the allocation's base). DeviceBuffer::address is `address`.
// INVALID_ARGUMENT for a null address or size 0, host memory (pageable or
// page-locked), managed memory (cudaMallocManaged: CUDA IPC refuses it) and
// a range past the end of its allocation; FAILED_PRECONDITION when there is
// no CUDA device or driver, or the runtime refuses to export the allocation
// (cudaIpcGetMemHandle: e.g. memory of a cudaMallocAsync pool).
absl::StatusOr<DeviceBuffer> DescribeDeviceBuffer(const void* address, size_t size_bytes);

}  // namespace gift::client

#endif  // GIFT_WORKER_CLIENT_CUDA_DEVICE_BUFFER_H_
