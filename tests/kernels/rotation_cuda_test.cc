// The rows' Hadamard rotation on the GPU (kernels/transform/rotation_cuda.h)
// against the CPU rotation (transform::HadamardTransform) bit for bit:
// forward and inverse, every block size up to the largest, rows beyond the
// grid. On a device, and over the host emulation (the "emulated." tests).
#include "kernels/transform/rotation_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transform/hadamard_transform.h"
#include "gtest/gtest.h"
#include "tests/kernels/transform_cuda_test_util.h"
#include "tests/transform/test_util.h"

namespace gift::kernels {
namespace {

using namespace cuda_test;  // NOLINT: the shared GPU test helpers

TEST(RowRotationCuda, MatchesTheCpuRotationBitForBit) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  CudaStream stream;
  struct Case {
    int64_t rows, cols, block;
  };
  for (const Case c :
       {Case{3, 16, 2}, Case{5, 96, 16}, Case{7, 96, 32}, Case{300, 64, 64}, Case{2, 512, 256}}) {
    SCOPED_TRACE(absl::StrCat(c.rows, "x", c.cols, " block ", c.block));
    auto cpu = transform::HadamardTransform::Create(c.rows, c.cols, {.block = c.block});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gpu = RowRotationCuda::Create(*cpu, stream.get());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const size_t size = c.rows * c.cols;
    const std::vector<float> g = transform::testing::AnisotropicMatrix(c.rows, c.cols, 17);
    std::vector<float> want(size), back(size);
    ASSERT_TRUE(cpu->Forward(g.data(), c.rows, c.cols, want.data()).ok());
    ASSERT_TRUE(cpu->Inverse(want.data(), c.rows, c.cols, back.data()).ok());

    DeviceFloats x(size);
    x.Upload(g);
    ASSERT_TRUE(gpu->Forward(x.get(), c.rows).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    const std::vector<float> got = x.Download(size);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), size * sizeof(float)), 0);
    ASSERT_TRUE(gpu->Inverse(x.get(), c.rows).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    const std::vector<float> got_back = x.Download(size);
    EXPECT_EQ(std::memcmp(got_back.data(), back.data(), size * sizeof(float)), 0);
  }
}

TEST(RowRotationCuda, RefusesANullBufferAndBlocksAboveTheLargest) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto big = transform::HadamardTransform::Create(1, 1024, {.block = 512});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(RowRotationCuda::Create(*big, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto small = transform::HadamardTransform::Create(1, 64, {.block = 16});
  auto gpu = RowRotationCuda::Create(*small, nullptr);
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->Forward(nullptr, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RowRotationCudaNoDevice, CreateFailsWithAStatus) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto cpu = transform::HadamardTransform::Create(1, 64, {.block = 16});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(RowRotationCuda::Create(*cpu, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gift::kernels
