// Device buffers a training process hands the worker as CUDA IPC handles
// (gift.v1.SharedBuffer.cuda_ipc_handle + cuda_device): each allocation is
// opened once with cudaIpcOpenMemHandle and kept mapped until this object is
// destroyed, so registering several tensors of one allocation, or
// registering again, maps nothing twice.
//
// A library of its own (gift_worker_cuda), built only with CUDA, so that
// the worker and its tests build and run without the CUDA Toolkit.
//
// Bounds: the requested range [offset, offset + size) is checked against
// the exporting allocation's size (the driver's cuMemGetAddressRange,
// reached through the runtime's driver entry points, so that nothing links
// libcuda), never trusted from the request.
//
// Ownership and thread safety: the object owns the mappings; the pointers
// it returns are valid until it is destroyed (the exporter must keep its
// allocation alive as long, which is the CUDA IPC contract). Not
// thread-safe: callers serialize (the worker's RegisterBuffers does).
#ifndef GIFT_WORKER_CUDA_CUDA_IPC_BUFFERS_H_
#define GIFT_WORKER_CUDA_CUDA_IPC_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::worker {

class CudaIpcBuffers {
 public:
  // FailedPrecondition when no CUDA device is present (or no driver);
  // Internal when the driver's entry point cannot be found.
  static absl::StatusOr<std::unique_ptr<CudaIpcBuffers>> Create();

  ~CudaIpcBuffers();
  CudaIpcBuffers(const CudaIpcBuffers&) = delete;
  CudaIpcBuffers& operator=(const CudaIpcBuffers&) = delete;

  // The device address of [offset, offset + size) of the allocation exported
  // as `handle` (the bytes of a cudaIpcMemHandle_t) on `device`.
  // InvalidArgument for a handle of the wrong length, a device index out of
  // range, or a range outside the allocation; FailedPrecondition when the
  // driver refuses the handle (not exported, exporter gone, this process's
  // own allocation). Opens the handle on first use only.
  absl::StatusOr<void*> Open(absl::string_view handle, int device, uint64_t offset,
                             uint64_t size);

  // Allocations mapped now.
  size_t mapped() const { return mappings_.size(); }

 private:
  struct Mapping {
    int device = 0;
    void* base = nullptr;
    uint64_t size = 0;
  };
  // The driver's cuMemGetAddressRange (cuda_ipc_buffers.cc casts it).
  explicit CudaIpcBuffers(void* address_range) : address_range_(address_range) {}

  void* address_range_;
  // Keyed by the device index and the handle bytes.
  absl::flat_hash_map<std::string, Mapping> mappings_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_CUDA_CUDA_IPC_BUFFERS_H_
