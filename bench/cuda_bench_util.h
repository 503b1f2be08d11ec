// Device-side helpers of gift-bench's GPU parts (codec_bench_cuda.cc,
// transform_bench_cuda.cc): CUDA errors as absl::Status; RAII owners of
// device memory, a stream and a pair of timing events; timing with events.
// Host code only; included only where GIFT_BENCH_WITH_CUDA is set.
//
// Thread safety: the owners are thread-compatible (one per thread).
#ifndef GIFT_BENCH_CUDA_BENCH_UTIL_H_
#define GIFT_BENCH_CUDA_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/base/status_macros.h"
#include "common/base/unique_handle.h"
#include "kernels/cuda_status.h"

namespace gift::bench {

using kernels::CudaStatus;

#define GIFT_BENCH_CUDA(expr) GIFT_RETURN_IF_ERROR(::gift::bench::CudaStatus((expr), #expr))

// Device memory, freed on destruction. Zero bytes hold no allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) {
    DeviceBuffer b;
    b.bytes_ = bytes;
    if (bytes > 0) {
      GIFT_RETURN_IF_ERROR(
          CudaStatus(cudaMalloc(&b.ptr_, bytes), absl::StrCat("cudaMalloc of ", bytes, " bytes")));
    }
    return b;
  }
  // A buffer holding a copy of `host`.
  static absl::StatusOr<DeviceBuffer> Upload(const std::vector<float>& host) {
    return Upload(host.data(), host.size() * sizeof(float));
  }
  // A buffer holding a copy of `bytes` host bytes.
  static absl::StatusOr<DeviceBuffer> Upload(const void* host, size_t bytes) {
    GIFT_ASSIGN_OR_RETURN(DeviceBuffer b, Allocate(bytes));
    if (bytes > 0) GIFT_BENCH_CUDA(cudaMemcpy(b.ptr_, host, bytes, cudaMemcpyHostToDevice));
    return b;
  }

  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr_); }
  float* floats() const { return static_cast<float*>(ptr_); }
  size_t size() const { return bytes_; }

  absl::Status Download(void* host) const {
    if (bytes_ > 0) GIFT_BENCH_CUDA(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream, destroyed with its owner.
class Stream {
 public:
  absl::Status Init() {
    return CudaStatus(cudaStreamCreateWithFlags(s_.put(), cudaStreamNonBlocking),
                      "cudaStreamCreate");
  }
  // The same at `priority` (cudaDeviceGetStreamPriorityRange: lower numbers
  // are higher priorities; 0 is the default).
  absl::Status InitWithPriority(int priority) {
    return CudaStatus(cudaStreamCreateWithPriority(s_.put(), cudaStreamNonBlocking, priority),
                      "cudaStreamCreateWithPriority");
  }
  cudaStream_t get() const { return s_.get(); }

 private:
  UniqueHandle<cudaStream_t, cudaStreamDestroy> s_;
};

// Two events for timing a sequence on a stream.
class EventPair {
 public:
  absl::Status Init() {
    GIFT_BENCH_CUDA(cudaEventCreate(start_.put()));
    GIFT_BENCH_CUDA(cudaEventCreate(stop_.put()));
    return absl::OkStatus();
  }
  cudaEvent_t start() const { return start_.get(); }
  cudaEvent_t stop() const { return stop_.get(); }

 private:
  UniqueHandle<cudaEvent_t, cudaEventDestroy> start_, stop_;
};

// One untimed warm-up call, then `reps` calls each timed by an event pair on
// `stream`. `fn` enqueues its work on `stream`.
inline absl::StatusOr<Timing> TimeOnDevice(int reps, cudaStream_t stream, const EventPair& ev,
                                           const std::function<absl::Status()>& fn) {
  GIFT_RETURN_IF_ERROR(fn());
  GIFT_BENCH_CUDA(cudaStreamSynchronize(stream));
  Timing t;
  for (int r = 0; r < reps; ++r) {
    GIFT_BENCH_CUDA(cudaEventRecord(ev.start(), stream));
    GIFT_RETURN_IF_ERROR(fn());
    GIFT_BENCH_CUDA(cudaEventRecord(ev.stop(), stream));
    GIFT_BENCH_CUDA(cudaEventSynchronize(ev.stop()));
    float ms = 0;
    GIFT_BENCH_CUDA(cudaEventElapsedTime(&ms, ev.start(), ev.stop()));
    t.seconds.push_back(ms * 1e-3);
  }
  t.median_s = Median(t.seconds);
  return t;
}

}  // namespace gift::bench

#endif  // GIFT_BENCH_CUDA_BENCH_UTIL_H_
