// What the worker needs of CUDA device memory: the device ranges a training
// process exports (gift.v1.SharedBuffer.cuda_ipc_handle + cuda_device) opened
// in this process, and synchronous copies between them and host memory.
// registered_tensor.h views CUDA IPC buffers through it, and every host read
// or write of a device tensor's data goes through CopyToHost / CopyToDevice
// (a device pointer is never dereferenced on the host).
//
// The implementation is worker/cuda/cuda_device_memory.h (CUDA IPC and
// cudaMemcpy; built only with CUDA). A worker without one (a build without
// CUDA, or no device) has none (nullptr) and refuses CUDA IPC buffers.
// Tests use host memory standing in for device memory.
//
// Ownership: an implementation owns what Open mapped; the pointers Open
// returns stay valid until it is destroyed (the exporter must keep its
// allocation alive as long: the CUDA IPC contract). Thread safety: every
// method may be called from any thread.
#ifndef GIFT_WORKER_INTAKE_DEVICE_MEMORY_H_
#define GIFT_WORKER_INTAKE_DEVICE_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/rpc/buffer_contract.h"

namespace gift::worker {

// Bytes of a cudaIpcMemHandle_t, checked before Open.
using rpc::kCudaIpcHandleBytes;

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // The device address of [offset, offset + size) of the allocation exported
  // as `handle` (kCudaIpcHandleBytes bytes) on `device` (in [0,
  // device_count())); offset counts from the allocation's base. Opening a
  // handle maps it once and keeps it mapped while this object lives: a
  // second Open of the same handle maps nothing. InvalidArgument for a
  // handle of the wrong length, a device out of range or a range outside
  // the allocation (checked against its real size, never trusted from the
  // request); FailedPrecondition when the handle is refused (not exported,
  // exporter gone).
  virtual absl::StatusOr<void*> Open(absl::string_view handle, int device, uint64_t offset,
                                     uint64_t size) = 0;

  // Synchronous copies of `bytes` between host memory and device memory
  // Open returned (complete when they return). Internal on a CUDA error.
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) const = 0;
  virtual absl::Status CopyToDevice(void* device_dst, const void* host_src,
                                    uint64_t bytes) const = 0;

  // The devices this process sees (WorkerInfo.cuda_device_count).
  virtual int device_count() const = 0;
};

// How a worker reaches device memory: `memory` (not owned; nullptr: it has
// none) and, without one, what it answers for a CUDA IPC buffer
// (`unavailable`: Unimplemented in a build without CUDA, which is the
// default; the CUDA build's daemon sets FailedPrecondition "no CUDA device"
// when it finds none).
struct DeviceAccess {
  DeviceMemory* memory = nullptr;
  // Whether the engine runs device tensors (PushPullEngineOptions::
  // device_stages is set): then FP32 device buffers are handed to it as
  // device tensors (zero copy); otherwise they are staged through the host
  // like 16-bit ones (registered_tensor.h).
  bool engine_device_stage = false;
  absl::Status unavailable = absl::UnimplementedError(
      "CUDA IPC buffers need a gift-worker built with CUDA device support; register host "
      "buffers");
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_DEVICE_MEMORY_H_
