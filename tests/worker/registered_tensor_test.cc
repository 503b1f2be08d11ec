// RegisteredTensor::View of CUDA IPC buffers (worker/intake/registered_tensor.h)
// over a fake DeviceMemory (host memory standing in for device memory): the
// specs it accepts (FP32 zero copy as a device tensor, one mapping per
// allocation), every refusal, 16-bit device tensors staged through the host
// exactly as the host conversions do, and the copies' errors.
#include "worker/intake/registered_tensor.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/fake_device_memory.h"
#include "worker/intake/dtype_conversion.h"

namespace gift::worker {
namespace {

using testing::FakeDeviceMemory;

gift::v1::BufferSpec DeviceSpec(const std::string& name, const std::string& handle,
                                gift::v1::DType dtype, std::vector<int64_t> shape, uint64_t offset,
                                uint64_t size, int device = 0) {
  gift::v1::BufferSpec b;
  b.set_name(name);
  for (int64_t d : shape) b.add_shape(d);
  b.set_dtype(dtype);
  b.mutable_buffer()->set_cuda_ipc_handle(handle);
  b.mutable_buffer()->set_cuda_device(device);
  b.mutable_buffer()->set_offset_bytes(offset);
  b.mutable_buffer()->set_size_bytes(size);
  return b;
}

TEST(RegisteredTensorDeviceTest, Fp32IsAZeroCopyDeviceTensorAndAnAllocationMapsOnce) {
  std::vector<float> allocation(1024);
  FakeDeviceMemory memory(2);
  const std::string handle = memory.Export(allocation.data(), allocation.size() * 4, 1);
  const DeviceAccess access{.memory = &memory, .engine_device_stage = true};
  auto a = RegisteredTensor::View(
      DeviceSpec("a", handle, gift::v1::DTYPE_FLOAT32, {8, 16}, 0, 8 * 16 * 4, 1), nullptr, access,
      "a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = RegisteredTensor::View(
      DeviceSpec("b", handle, gift::v1::DTYPE_FLOAT32, {2, 3, 4}, 512 * 4, 24 * 4, 1), nullptr,
      access, "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(a->local.device);
  EXPECT_EQ(a->local.data, allocation.data());
  EXPECT_EQ(a->local.rows, 8u);
  EXPECT_EQ(a->local.cols, 16u);
  EXPECT_TRUE(b->local.device);
  EXPECT_EQ(b->local.data, allocation.data() + 512);
  EXPECT_EQ(b->local.rows, 6u);
  EXPECT_EQ(b->local.cols, 4u);
  EXPECT_EQ(memory.mapped(), 1u);  // one allocation, opened once
  // FP32: nothing to stage, nothing copied.
  EXPECT_TRUE(a->Widen().ok());
  EXPECT_TRUE(a->Narrow().ok());
  EXPECT_EQ(memory.copies_to_host() + memory.copies_to_device(), 0u);
  // Its contents reach the host only through the device memory.
  allocation[3] = 7.5f;
  std::vector<float> host;
  ASSERT_TRUE(ReadTensor(a->local, &memory, &host).ok());
  ASSERT_EQ(host.size(), 128u);
  EXPECT_EQ(host[3], 7.5f);
  EXPECT_EQ(memory.copies_to_host(), 1u);
  EXPECT_EQ(ReadTensor(a->local, nullptr, &host).code(), absl::StatusCode::kFailedPrecondition);

  // An engine without a device stage: staged through the host, copied in
  // by Widen and out by Narrow whole.
  auto staged = RegisteredTensor::View(
      DeviceSpec("s", handle, gift::v1::DTYPE_FLOAT32, {8, 16}, 0, 8 * 16 * 4, 1), nullptr,
      {.memory = &memory}, "s");
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_FALSE(staged->local.device);
  EXPECT_EQ(staged->local.data, staged->staging.data());
  ASSERT_TRUE(staged->Widen().ok());
  EXPECT_EQ(staged->local.data[3], 7.5f);
  staged->local.data[5] = -2.25f;
  ASSERT_TRUE(staged->Narrow().ok());
  EXPECT_EQ(allocation[5], -2.25f);
  EXPECT_EQ(memory.copies_to_host(), 2u);
  EXPECT_EQ(memory.copies_to_device(), 1u);
}

TEST(RegisteredTensorDeviceTest, RefusesEveryBadSpecNamingTheTensor) {
  std::vector<float> allocation(256);
  FakeDeviceMemory memory(1);
  const std::string handle = memory.Export(allocation.data(), allocation.size() * 4);
  const DeviceAccess access{.memory = &memory};
  struct Case {
    const char* what;
    gift::v1::BufferSpec spec;
    absl::StatusCode code;
  };
  const auto f32 = gift::v1::DTYPE_FLOAT32;
  std::vector<Case> cases = {
      {"short handle", DeviceSpec("t", handle.substr(1), f32, {4, 4}, 0, 64),
       absl::StatusCode::kInvalidArgument},
      {"long handle", DeviceSpec("t", handle + "x", f32, {4, 4}, 0, 64),
       absl::StatusCode::kInvalidArgument},
      {"empty handle", DeviceSpec("t", "", f32, {4, 4}, 0, 64), absl::StatusCode::kInvalidArgument},
      {"device 1 of 1", DeviceSpec("t", handle, f32, {4, 4}, 0, 64, 1),
       absl::StatusCode::kInvalidArgument},
      {"device -1", DeviceSpec("t", handle, f32, {4, 4}, 0, 64, -1),
       absl::StatusCode::kInvalidArgument},
      {"past the allocation", DeviceSpec("t", handle, f32, {4, 4}, 1024 - 32, 64),
       absl::StatusCode::kInvalidArgument},
      {"offset overflows", DeviceSpec("t", handle, f32, {4, 4}, UINT64_MAX - 3, 64),
       absl::StatusCode::kInvalidArgument},
      {"misaligned offset", DeviceSpec("t", handle, f32, {4, 4}, 2, 64),
       absl::StatusCode::kInvalidArgument},
      {"misaligned 16-bit offset", DeviceSpec("t", handle, gift::v1::DTYPE_BFLOAT16, {4, 4}, 3, 32),
       absl::StatusCode::kInvalidArgument},
      {"size mismatch", DeviceSpec("t", handle, f32, {4, 4}, 0, 60),
       absl::StatusCode::kInvalidArgument},
      {"16-bit size as FP32", DeviceSpec("t", handle, gift::v1::DTYPE_FLOAT16, {4, 4}, 0, 64),
       absl::StatusCode::kInvalidArgument},
      {"unknown handle", DeviceSpec("t", std::string(kCudaIpcHandleBytes, 'z'), f32, {4, 4}, 0, 64),
       absl::StatusCode::kFailedPrecondition},
      {"bad dtype", DeviceSpec("t", handle, gift::v1::DTYPE_UNSPECIFIED, {4, 4}, 0, 16),
       absl::StatusCode::kInvalidArgument},
      {"empty shape", DeviceSpec("t", handle, f32, {}, 0, 4), absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    auto r = RegisteredTensor::View(c.spec, nullptr, access, "buffers[0] 't'");
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status();
    EXPECT_NE(r.status().message().find("buffers[0] 't'"), absl::string_view::npos)
        << c.what << ": " << r.status();
  }
  EXPECT_EQ(memory.mapped(), 0u);  // nothing was opened for a refused spec

  // No device memory: the build's reason (Unimplemented without CUDA) or
  // the daemon's (FailedPrecondition without a device).
  const gift::v1::BufferSpec good = DeviceSpec("t", handle, f32, {4, 4}, 0, 64);
  auto none = RegisteredTensor::View(good, nullptr, DeviceAccess{}, "t");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented) << none.status();
  auto no_device = RegisteredTensor::View(
      good, nullptr, {.unavailable = absl::FailedPreconditionError("no CUDA device")}, "t");
  EXPECT_EQ(no_device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(no_device.status().message().find("no CUDA device"), absl::string_view::npos);
  EXPECT_TRUE(RegisteredTensor::View(good, nullptr, access, "t").ok());
}

TEST(RegisteredTensorDeviceTest, SixteenBitDeviceTensorsAreStagedLikeHostOnes) {
  constexpr size_t kRows = 12, kCols = 40, kN = kRows * kCols;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (gift::v1::DType dtype : {gift::v1::DTYPE_BFLOAT16, gift::v1::DTYPE_FLOAT16}) {
    const bool bf16 = dtype == gift::v1::DTYPE_BFLOAT16;
    auto narrow = [bf16](const float* src, uint16_t* dst, size_t n) {
      bf16 ? F32ToBf16(src, dst, n) : F32ToF16(src, dst, n);
    };
    auto widen = [bf16](const uint16_t* src, float* dst, size_t n) {
      bf16 ? Bf16ToF32(src, dst, n) : F16ToF32(src, dst, n);
    };
    // The "device" allocation (guarded: any host access but the fake's
    // copies faults): a gradient at 16 elements' offset.
    std::vector<float> gradient(kN);
    for (float& g : gradient) g = normal(rng);
    std::vector<uint16_t> exported(kN + 16);
    narrow(gradient.data(), exported.data() + 16, kN);
    FakeDeviceMemory memory;
    const uint64_t bytes = exported.size() * 2;
    void* allocation = memory.AllocateGuarded(bytes);
    ASSERT_NE(allocation, nullptr);
    memory.TestCopy(allocation, exported.data(), bytes, allocation);
    // The guard holds: a host read of the "device" memory faults.
    EXPECT_DEATH(
        {
          volatile const char* p = static_cast<const char*>(allocation);
          (void)*p;
        },
        "");
    const std::string handle = memory.Export(allocation, bytes);
    auto t = RegisteredTensor::View(DeviceSpec("h", handle, dtype, {kRows, kCols}, 32, kN * 2),
                                    nullptr, {.memory = &memory}, "h");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->local.device);  // the engine sees the host staging
    EXPECT_EQ(t->local.data, t->staging.data());

    ASSERT_TRUE(t->Widen().ok());
    std::vector<float> want(kN);
    widen(exported.data() + 16, want.data(), kN);
    EXPECT_EQ(std::memcmp(t->local.data, want.data(), kN * 4), 0);

    // The "average" goes back as the host conversion rounds it.
    for (size_t i = 0; i < kN; ++i) t->local.data[i] = 0.37f * gradient[i] + 1e-3f;
    std::vector<uint16_t> rounded(kN);
    narrow(t->local.data, rounded.data(), kN);
    ASSERT_TRUE(t->Narrow().ok());
    memory.TestCopy(exported.data(), allocation, bytes, allocation);
    EXPECT_EQ(std::memcmp(exported.data() + 16, rounded.data(), kN * 2), 0);
    EXPECT_EQ(exported[15], 0);  // nothing outside the range written
    EXPECT_EQ(memory.copies_to_host(), 1u);
    EXPECT_EQ(memory.copies_to_device(), 1u);

    // Round trip: widening what was narrowed gives the host conversion's values.
    ASSERT_TRUE(t->Widen().ok());
    widen(rounded.data(), want.data(), kN);
    EXPECT_EQ(std::memcmp(t->local.data, want.data(), kN * 4), 0);

    // A failed copy is an error naming the tensor, never a crash.
    memory.set_fail_copies(true);
    const absl::Status widened = t->Widen();
    EXPECT_EQ(widened.code(), absl::StatusCode::kInternal);
    EXPECT_NE(widened.message().find("'h'"), absl::string_view::npos) << widened;
    EXPECT_EQ(t->Narrow().code(), absl::StatusCode::kInternal);
  }
}

}  // namespace
}  // namespace gift::worker
