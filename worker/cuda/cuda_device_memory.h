// The worker's DeviceMemory (worker/intake/device_memory.h) on CUDA: CUDA IPC
// handles opened through CudaIpcBuffers (once per allocation, kept mapped,
// ranges checked against the allocation's real size) and synchronous
// cudaMemcpy copies (cudaMemcpyDefault: unified addressing finds the device
// of each pointer).
//
// In gift_worker_cuda, built only with CUDA.
//
// Ownership: owns the CudaIpcBuffers, so the mappings live as long as this
// object. Thread safety: every method may be called from any thread (Open
// is serialized by a mutex; the copies are the runtime's, which is
// thread-safe).
#ifndef GIFT_WORKER_CUDA_CUDA_DEVICE_MEMORY_H_
#define GIFT_WORKER_CUDA_CUDA_DEVICE_MEMORY_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/cuda/cuda_ipc_buffers.h"
#include "worker/intake/device_memory.h"

namespace gift::worker {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // FailedPrecondition when no CUDA device is present (or no driver): the
  // message says so ("no CUDA device ..."); Internal as CudaIpcBuffers.
  static absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> Create();

  absl::StatusOr<void*> Open(absl::string_view handle, int device, uint64_t offset,
                             uint64_t size) override;
  absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) const override;
  absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) const override;
  int device_count() const override { return device_count_; }

 private:
  CudaDeviceMemory(std::unique_ptr<CudaIpcBuffers> buffers, int device_count)
      : buffers_(std::move(buffers)), device_count_(device_count) {}

  absl::Mutex mu_;
  const std::unique_ptr<CudaIpcBuffers> buffers_ ABSL_PT_GUARDED_BY(mu_);
  const int device_count_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_CUDA_CUDA_DEVICE_MEMORY_H_
