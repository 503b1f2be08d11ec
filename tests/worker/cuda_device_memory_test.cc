// CudaDeviceMemory (worker/cuda/cuda_device_memory.h), the daemon's
// DeviceMemory: without a device its Create answers FailedPrecondition "no
// CUDA device" (what gift-worker then answers for CUDA IPC buffers); on a
// GPU (skips without one) the copies round-trip device memory bit for bit
// and Open refuses malformed handles, devices out of range and this
// process's own allocation. Opening another process's export is
// tests/kernels/cuda_ipc_buffers_test.cc's (CudaIpcBuffers, which this
// wraps).
#include "worker/cuda/cuda_device_memory.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda_status.h"

namespace gift::worker {
namespace {

using ::testing::HasSubstr;

bool HaveDevice() { return kernels::CudaDeviceAvailable(); }

TEST(CudaDeviceMemoryNoDevice, CreateSaysThereIsNoDevice) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto memory = CudaDeviceMemory::Create();
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kFailedPrecondition) << memory.status();
  EXPECT_THAT(memory.status().message(), HasSubstr("no CUDA device"));
}

TEST(CudaDeviceMemoryGpu, CopiesRoundTripAndBadHandlesAreRefused) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto memory = CudaDeviceMemory::Create();
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_GE((*memory)->device_count(), 1);
  constexpr size_t kBytes = 1 << 20;
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kBytes), cudaSuccess);
  std::vector<uint8_t> in(kBytes), out(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE((*memory)->CopyToDevice(device, in.data(), kBytes).ok());
  ASSERT_TRUE((*memory)->CopyToHost(out.data(), device, kBytes).ok());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), kBytes), 0);
  EXPECT_TRUE((*memory)->CopyToHost(out.data(), device, 0).ok());

  cudaIpcMemHandle_t handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, device), cudaSuccess);
  const std::string bytes(reinterpret_cast<const char*>(&handle), sizeof(handle));
  EXPECT_EQ((*memory)->Open(bytes.substr(1), 0, 0, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*memory)->Open(bytes, (*memory)->device_count(), 0, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The driver opens no handle of the process's own allocation.
  EXPECT_EQ((*memory)->Open(bytes, 0, 0, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

}  // namespace
}  // namespace gift::worker
