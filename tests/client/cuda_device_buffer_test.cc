// worker/client/cuda_device_buffer.h (gift_worker_client_cuda), against the
// real CUDA runtime: without a device, DescribeDeviceBuffer answers
// FAILED_PRECONDITION (runs everywhere); with one, a pointer inside a
// cudaMalloc allocation is described from the allocation's base (the
// handle is the one cudaIpcGetMemHandle gives for the base), and host,
// managed and out-of-range memory are refused. That a second process opens
// the handle is checked end to end by
// tests/worker/device_tensor_cluster_test.cc.
#include "worker/client/cuda_device_buffer.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda_status.h"

namespace gift::client {
namespace {

using ::testing::HasSubstr;

bool HaveDevice() { return kernels::CudaDeviceAvailable(); }

TEST(DescribeDeviceBufferNoDevice, FailsWithFailedPrecondition) {
  if (HaveDevice()) {
    GTEST_SKIP() << "a CUDA device is present";
  }
  std::vector<float> host(16);
  const absl::Status s = DescribeDeviceBuffer(host.data(), 64).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("no CUDA device"));
  EXPECT_EQ(DescribeDeviceBuffer(nullptr, 64).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DescribeDeviceBufferGpu, DescribesFromTheAllocationsBaseAndRefusesOtherMemory) {
  if (!HaveDevice()) {
    GTEST_SKIP() << "no CUDA device";
  }
  constexpr size_t kBytes = 1 << 20;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, kBytes), cudaSuccess);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);

  absl::StatusOr<DeviceBuffer> b = DescribeDeviceBuffer(static_cast<char*>(d) + 4096, 8192);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->device, device);
  EXPECT_EQ(b->offset_bytes, 4096u);
  EXPECT_EQ(b->size_bytes, 8192u);
  EXPECT_EQ(b->address, static_cast<char*>(d) + 4096);
  cudaIpcMemHandle_t base_handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&base_handle, d), cudaSuccess);
  ASSERT_EQ(b->ipc_handle.size(), sizeof(base_handle));
  EXPECT_EQ(std::memcmp(b->ipc_handle.data(), &base_handle, sizeof(base_handle)), 0);

  // The whole allocation fits; a range far past its end (beyond any
  // rounding of the allocation's size by the driver) does not.
  EXPECT_TRUE(DescribeDeviceBuffer(d, kBytes).ok());
  const absl::Status past =
      DescribeDeviceBuffer(static_cast<char*>(d) + kBytes - 64, size_t{1} << 30).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument) << past;
  EXPECT_THAT(past.message(), HasSubstr("past the end"));

  std::vector<float> host(16);
  const absl::Status pageable = DescribeDeviceBuffer(host.data(), 64).status();
  EXPECT_EQ(pageable.code(), absl::StatusCode::kInvalidArgument) << pageable;
  EXPECT_THAT(pageable.message(), HasSubstr("not device memory"));

  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);
  EXPECT_EQ(DescribeDeviceBuffer(pinned, 64).status().code(), absl::StatusCode::kInvalidArgument);
  cudaFreeHost(pinned);

  void* managed = nullptr;
  if (cudaMallocManaged(&managed, 4096) == cudaSuccess) {
    const absl::Status s = DescribeDeviceBuffer(managed, 64).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("managed memory"));
    cudaFree(managed);
  } else {
    (void)cudaGetLastError();
    ADD_FAILURE() << "cudaMallocManaged failed on a device that has memory";
  }
  cudaFree(d);
}

}  // namespace
}  // namespace gift::client
