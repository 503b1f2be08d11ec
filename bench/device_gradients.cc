#include "bench/device_gradients.h"

#include <utility>

#include "absl/strings/str_cat.h"

#ifdef GIFT_BENCH_WITH_CUDA
#include <cuda_runtime_api.h>

#include "worker/client/cuda_device_buffer.h"
#endif

namespace gift::bench {

#ifdef GIFT_BENCH_WITH_CUDA
namespace {

constexpr size_t kAlignment = 256;

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGradients>> DeviceGradients::Create(
    const std::vector<client::TensorSpec>& specs) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        "--device-tensors needs a CUDA device, and this machine has none");
  }
  std::unique_ptr<DeviceGradients> g(new DeviceGradients());
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const client::TensorSpec& s : specs) {
    size_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<size_t>(d);
    g->host_.emplace_back(n);
    offsets.push_back(total);
    total += (n * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  }
  if (absl::Status s = Cuda(cudaSetDevice(0), "cudaSetDevice(0)"); !s.ok()) return s;
  if (absl::Status s = Cuda(cudaMalloc(&g->allocation_, total), "cudaMalloc"); !s.ok()) return s;
  for (size_t t = 0; t < specs.size(); ++t) {
    absl::StatusOr<client::DeviceBuffer> b = client::DescribeDeviceBuffer(
        static_cast<char*>(g->allocation_) + offsets[t], g->host_[t].size() * sizeof(float));
    if (!b.ok()) return b.status();
    g->specs_.push_back({specs[t].name, specs[t].shape, gift::v1::DTYPE_FLOAT32, *std::move(b)});
  }
  return g;
}

DeviceGradients::~DeviceGradients() {
  if (allocation_ != nullptr) (void)cudaFree(allocation_);
}

absl::Status DeviceGradients::Upload() {
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (absl::Status s = Cuda(cudaMemcpy(specs_[t].buffer.address, host_[t].data(),
                                         host_[t].size() * sizeof(float), cudaMemcpyHostToDevice),
                              "cudaMemcpy to the device");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceGradients::Download() {
  for (size_t t = 0; t < specs_.size(); ++t) {
    if (absl::Status s = Cuda(cudaMemcpy(host_[t].data(), specs_[t].buffer.address,
                                         host_[t].size() * sizeof(float), cudaMemcpyDeviceToHost),
                              "cudaMemcpy to the host");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

#else  // a gift-bench without CUDA

absl::StatusOr<std::unique_ptr<DeviceGradients>> DeviceGradients::Create(
    const std::vector<client::TensorSpec>&) {
  return absl::FailedPreconditionError(
      "--device-tensors needs a gift-bench built with CUDA (-DGIFT_ENABLE_CUDA=ON)");
}

DeviceGradients::~DeviceGradients() = default;
absl::Status DeviceGradients::Upload() { return absl::OkStatus(); }
absl::Status DeviceGradients::Download() { return absl::OkStatus(); }

#endif

}  // namespace gift::bench
