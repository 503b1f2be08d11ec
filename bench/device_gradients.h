// `gift-bench cluster --device-tensors`: one worker's gradients in device
// memory, registered with its gift-worker by CUDA IPC
// (worker/client/cuda_device_buffer.h). The bench fills each gradient in a
// host staging buffer, Upload()s them (synchronous copies: the writes are
// complete before PushPull), and Download()s the averages after PushPull
// to hash and check them.
//
// Ownership: owns one device allocation holding every tensor (aligned
// offsets, so that all but the first are away from the allocation's base)
// and the staging buffers; the allocation is freed on destruction, so the
// worker must be done with it (stopped, or the set replaced) first. Thread
// safety: none; one driving thread per worker.
#ifndef GIFT_BENCH_DEVICE_GRADIENTS_H_
#define GIFT_BENCH_DEVICE_GRADIENTS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/device_tensor.h"
#include "worker/client/worker_client.h"

namespace gift::bench {

class DeviceGradients {
 public:
  // FP32 device tensors of `specs` on device 0, described for Register.
  // FAILED_PRECONDITION in a gift-bench built without CUDA or on a machine
  // without a device; INTERNAL when an allocation fails.
  static absl::StatusOr<std::unique_ptr<DeviceGradients>> Create(
      const std::vector<client::TensorSpec>& specs);
  ~DeviceGradients();
  DeviceGradients(const DeviceGradients&) = delete;
  DeviceGradients& operator=(const DeviceGradients&) = delete;

  const std::vector<client::DeviceTensorSpec>& specs() const { return specs_; }
  // Tensor t's host staging buffer (its elements, FP32).
  float* host(size_t t) { return host_[t].data(); }
  size_t elements(size_t t) const { return host_[t].size(); }
  // Every staging buffer to its device tensor, then the reverse; both
  // complete on return. INTERNAL with the CUDA error.
  absl::Status Upload();
  absl::Status Download();

 private:
  DeviceGradients() = default;

  void* allocation_ = nullptr;
  std::vector<client::DeviceTensorSpec> specs_;
  std::vector<std::vector<float>> host_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_DEVICE_GRADIENTS_H_
