// One tensor the training process registered: its range of a buffer it
// handed over (buffer_socket.h) or exported from device memory (CUDA IPC,
// device_memory.h), in the buffer's dtype, and the FP32 span the engine
// works on:
//
//   host FP32:      the span is the buffer itself (zero copy);
//   host BF16/FP16: the span is the tensor's own FP32 staging, which Widen
//                   fills from the buffer (exact) and Narrow rounds back
//                   into it (nearest even, dtype_conversion.h), one pass each;
//   device FP32:    the span is the device range itself (zero copy;
//                   local.device: the engine's device stage transforms and
//                   encodes it on the GPU);
//   device BF16/FP16: staged through the host like host 16-bit buffers:
//                   Widen copies the 16-bit bytes device-to-host into a host
//                   scratch and widens them into the FP32 staging, Narrow
//                   rounds into the scratch and copies it host-to-device; the
//                   engine sees a host tensor. (A device widen / narrow
//                   kernel, which would keep such a tensor on the GPU, is
//                   later work.)
//
// Ownership: shares the handed buffer's mapping (kept mapped while any
// registered tensor views it); a device range stays mapped while the
// DeviceMemory lives (not owned). Owns the staging and scratch. Thread
// safety: View is pure; Widen / Narrow write the staging / the buffer and
// must not run concurrently on one tensor (the daemon runs them under its
// step lock).
#ifndef GIFT_WORKER_INTAKE_REGISTERED_TENSOR_H_
#define GIFT_WORKER_INTAKE_REGISTERED_TENSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gift/v1/worker.pb.h"
#include "worker/intake/buffer_socket.h"
#include "worker/intake/device_memory.h"
#include "worker/intake/local_tensor.h"
#include "worker/intake/shared_buffer.h"

namespace gift::worker {

struct RegisteredTensor {
  // Checks `spec` (name, shape, dtype, sizes, location) and views its range
  // of the buffer `buffers` handed over (nullptr: the worker has no buffer
  // socket) or, for a CUDA IPC buffer, opens it through `device.memory`.
  // Errors name `what`: InvalidArgument (bad spec, misaligned offset, a
  // shm_name buffer, which is refused; a CUDA IPC handle of the wrong
  // length, a device index out of range, a range outside the allocation),
  // FailedPrecondition (no buffer socket; a handle the driver refuses),
  // `device.unavailable` (CUDA IPC without device memory), NotFound (unknown
  // handle), OutOfRange (a range past the buffer). tensor_id is left 0.
  static absl::StatusOr<RegisteredTensor> View(const gift::v1::BufferSpec& spec,
                                               const BufferSocket* buffers,
                                               const DeviceAccess& device, absl::string_view what);

  // buffer -> staging, staging -> buffer (16-bit only; no-ops otherwise).
  // Errors (device buffers only): the copy's, naming the tensor.
  absl::Status Widen() const;
  absl::Status Narrow() const;

  LocalTensor local;  // data: the buffer (FP32) or `staging`
  std::vector<int64_t> shape;
  gift::v1::DType dtype = gift::v1::DTYPE_FLOAT32;
  std::shared_ptr<const SharedBuffer> mapping;  // keeps `bytes` mapped (host buffers)
  char* bytes = nullptr;                        // the tensor in the buffer
  // Set for CUDA IPC buffers: `bytes` is device memory, read and written
  // only through it.
  const DeviceMemory* device_memory = nullptr;
  std::vector<float> staging;             // 16-bit buffers only
  mutable std::vector<uint16_t> scratch;  // 16-bit device buffers: the host copy
};

// `t`'s FP32 contents into `out` (resized): a copy of host memory, or a
// device-to-host copy through `memory` when t.device. FailedPrecondition
// for a device tensor without `memory`; the copy's errors.
absl::Status ReadTensor(const LocalTensor& t, const DeviceMemory* memory, std::vector<float>* out);

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_REGISTERED_TENSOR_H_
