// The CUDA codec against the CPU codec, bit for bit: codes and scales are
// compared with memcmp, decoded floats by their bit patterns.
//
// Every GPU test skips when no CUDA device is present; the no-device
// behaviour (FailedPrecondition, no crash) is tested everywhere.
#include "kernels/codec/codec_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"
#include "tests/kernels/codec_cuda_test_util.h"

namespace gift::kernels {
namespace {

using codec::CodecSpec;
using codec::EncodedTensor;
using codec::EncodedView;
using codec::MutableEncodedView;
using codec::RngKey;
using codec::testing::Bits;
using codec::testing::FromBits;
using ::testing::HasSubstr;

constexpr RngKey kKey{.tensor = 0x0123456789ABCDEFull, .step = (uint64_t{1} << 32) + 77, .rank = 5};

using codec_cuda_testing::CudaStream;
using codec_cuda_testing::DeviceBuffer;
using codec_cuda_testing::DeviceEncoded;
using codec_cuda_testing::Download;
using codec_cuda_testing::SameBytes;
using codec_cuda_testing::SameFloatBits;
using codec_cuda_testing::Shape;
using codec_cuda_testing::ShapeName;
using codec_cuda_testing::SpecParamName;
using codec_cuda_testing::TestData;
using codec_cuda_testing::Upload;

// Runs encode, decode and decode-accumulate on both codecs and compares.
// Offsets misalign the device pointers: x and out by `float_offset` floats,
// codes and scales by `byte_offset` bytes.
void CompareWithCpu(const std::string& spec_name, const Shape& shape, size_t float_offset,
                    size_t byte_offset) {
  const CodecSpec spec = codec::testing::Spec(spec_name);
  const uint64_t n = shape.rows * shape.cols;
  const std::vector<float> x = TestData(shape.rows, shape.cols, 7);

  // CPU reference.
  auto cpu = EncodedTensor::Create(spec, shape.rows, shape.cols);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(codec::Encode(x.data(), cpu->mutable_view(), kKey).ok());
  const codec::EncodedLayout& layout = cpu->layout();

  // GPU encode.
  CudaStream stream;
  DeviceBuffer x_buf(n * sizeof(float), float_offset * sizeof(float));
  float* dx = x_buf.floats();
  Upload(dx, x.data(), n * sizeof(float));
  DeviceEncoded gpu(layout, byte_offset, byte_offset);
  const absl::Status encoded = EncodeCuda(dx, gpu.view(spec), kKey, stream.get());
  ASSERT_TRUE(encoded.ok()) << encoded;
  EXPECT_TRUE(SameBytes(cpu->codes(), Download<uint8_t>(gpu.codes, layout.code_bytes))) << "codes";
  EXPECT_TRUE(SameBytes(cpu->scales(), Download<uint8_t>(gpu.scales, layout.scale_bytes)))
      << "scales";

  // GPU decode of the CPU's bytes (identical by now, but decode must not
  // depend on the encode above being right).
  Upload(gpu.codes, cpu->codes().data(), layout.code_bytes);
  Upload(gpu.scales, cpu->scales().data(), layout.scale_bytes);
  std::vector<float> want(n);
  ASSERT_TRUE(codec::Decode(cpu->view(), want.data()).ok());
  DeviceBuffer out_buf(n * sizeof(float), float_offset * sizeof(float));
  float* dout = out_buf.floats();
  absl::Status decoded = DecodeCuda(gpu.view(spec), dout, /*accumulate=*/false, stream.get());
  ASSERT_TRUE(decoded.ok()) << decoded;
  EXPECT_TRUE(SameFloatBits(want, Download<float>(dout, n))) << "decode";

  // Accumulate onto other data (with its own zeros, -0.0 and denormals).
  std::vector<float> acc = TestData(shape.rows, shape.cols, 8);
  Upload(dout, acc.data(), n * sizeof(float));
  ASSERT_TRUE(codec::DecodeAccumulate(cpu->view(), acc.data()).ok());
  decoded = DecodeCuda(gpu.view(spec), dout, /*accumulate=*/true, stream.get());
  ASSERT_TRUE(decoded.ok()) << decoded;
  EXPECT_TRUE(SameFloatBits(acc, Download<float>(dout, n))) << "decode-accumulate";
}

// ---- no device ----------------------------------------------------------------------

TEST(CodecCudaNoDevice, FailsWithAStatusInsteadOfCrashing) {
  const CodecSpec spec = codec::testing::Spec("e4m3/tensor");
  const MutableEncodedView out{spec, 4, 4, nullptr, nullptr};
  const EncodedView in = out;
  const absl::Status enc = EncodeCuda(nullptr, out, kKey, nullptr);
  const absl::Status dec = DecodeCuda(in, nullptr, false, nullptr);
  const std::vector<EncodedView> inputs = {in};
  const absl::Status red = ReduceCuda(inputs, nullptr, 1.0f, out, kKey, nullptr);
  if (!CudaDeviceAvailable()) {
    EncodeCheck check;
    EXPECT_EQ(EncodeCudaAsync(nullptr, out, kKey, nullptr, &check).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(DecodeCudaAsync(in, nullptr, false, nullptr).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_FALSE(enc.ok());
  EXPECT_FALSE(dec.ok());
  EXPECT_FALSE(red.ok());
  if (!CudaDeviceAvailable()) {
    EXPECT_EQ(enc.code(), absl::StatusCode::kFailedPrecondition) << enc;
    EXPECT_EQ(dec.code(), absl::StatusCode::kFailedPrecondition) << dec;
    EXPECT_EQ(red.code(), absl::StatusCode::kFailedPrecondition) << red;
  } else {
    // With a device the null buffers are refused as arguments.
    EXPECT_EQ(enc.code(), absl::StatusCode::kInvalidArgument) << enc;
    EXPECT_EQ(dec.code(), absl::StatusCode::kInvalidArgument) << dec;
    EXPECT_EQ(red.code(), absl::StatusCode::kInvalidArgument) << red;
  }
}

// ---- encode / decode against the CPU ----------------------------------------------------

// One long odd row: many grid-stride turns and an odd element count. The
// host emulation of CUDA (codec_cuda_emulated_test) runs kernels about a
// thousand times slower than a GPU, so it gets a shorter one.
#if defined(GIFT_CODEC_CUDA_TEST_EMULATED)
constexpr uint64_t kLongRow = (1 << 16) + 3;
#else
constexpr uint64_t kLongRow = (1 << 20) + 3;
#endif

const Shape kShapes[] = {
    {1, 1},  {1, 7},   {7, 33}, {3, 129}, {64, 1000}, {1, kLongRow},
    {5, 64}, {3, 132}, {2, 20}, {4, 18},  {33, 256},  {2, 4096 + 16},
};

class CodecCudaTest : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

TEST_P(CodecCudaTest, MatchesCpuBitForBit) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const auto& [spec, shape] = GetParam();
  CompareWithCpu(spec, shape, /*float_offset=*/0, /*byte_offset=*/0);
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, CodecCudaTest,
                         ::testing::Combine(::testing::ValuesIn(codec::testing::AllSpecNames()),
                                            ::testing::ValuesIn(kShapes)),
                         [](const ::testing::TestParamInfo<CodecCudaTest::ParamType>& info) {
                           return absl::StrCat(SpecParamName(std::get<0>(info.param)), "_",
                                               ShapeName(std::get<1>(info.param)));
                         });

// Misaligned device pointers take the byte-wise load/store paths.
class CodecCudaMisalignedTest : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

TEST_P(CodecCudaMisalignedTest, MatchesCpuBitForBit) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const auto& [spec, shape] = GetParam();
  CompareWithCpu(spec, shape, /*float_offset=*/1, /*byte_offset=*/1);
  CompareWithCpu(spec, shape, /*float_offset=*/2, /*byte_offset=*/2);
}

const Shape kMisalignedShapes[] = {{5, 64}, {3, 37}, {1, 1003}};

INSTANTIATE_TEST_SUITE_P(
    AllSpecs, CodecCudaMisalignedTest,
    ::testing::Combine(::testing::ValuesIn(codec::testing::AllSpecNames()),
                       ::testing::ValuesIn(kMisalignedShapes)),
    [](const ::testing::TestParamInfo<CodecCudaMisalignedTest::ParamType>& info) {
      return absl::StrCat(SpecParamName(std::get<0>(info.param)), "_",
                          ShapeName(std::get<1>(info.param)));
    });

// ---- non-finite input -------------------------------------------------------------------

class CodecCudaNonFiniteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecCudaNonFiniteTest, RefusedLikeTheCpu) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const CodecSpec spec = codec::testing::Spec(GetParam());
  CudaStream stream;
  const float bad_values[] = {
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (const Shape shape : {Shape{7, 33}, Shape{4, 64}, Shape{1, 5}}) {
    const uint64_t n = shape.rows * shape.cols;
    auto cpu = EncodedTensor::Create(spec, shape.rows, shape.cols);
    ASSERT_TRUE(cpu.ok());
    DeviceBuffer x_buf(n * sizeof(float));
    float* dx = x_buf.floats();
    DeviceEncoded gpu(cpu->layout(), 0, 0);
    for (const float bad : bad_values) {
      for (const uint64_t at : {uint64_t{0}, n / 2, n - 1}) {
        std::vector<float> x = TestData(shape.rows, shape.cols, 3);
        x[at] = bad;
        EXPECT_EQ(codec::Encode(x.data(), cpu->mutable_view(), kKey).code(),
                  absl::StatusCode::kInvalidArgument);
        Upload(dx, x.data(), n * sizeof(float));
        const absl::Status s = EncodeCuda(dx, gpu.view(spec), kKey, stream.get());
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
            << ShapeName(shape) << " at " << at << " value " << bad << ": " << s;
        EXPECT_THAT(s.message(), HasSubstr("NaN or Inf"));
      }
    }
    // And the same buffers encode fine once the input is finite again.
    const std::vector<float> x = TestData(shape.rows, shape.cols, 3);
    Upload(dx, x.data(), n * sizeof(float));
    EXPECT_TRUE(EncodeCuda(dx, gpu.view(spec), kKey, stream.get()).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, CodecCudaNonFiniteTest,
                         ::testing::ValuesIn(codec::testing::AllSpecNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return SpecParamName(info.param);
                         });

// ---- asynchronous encode and decode -------------------------------------------------------

// Several encodes in flight on one stream, each with its own check (stale
// contents first: the encode zeroes it), one input holding a NaN: only that
// check reports it, and the codes of all are EncodeCuda's, the CPU's.
class CodecCudaAsyncTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CodecCudaAsyncTest, ChecksInFlightAreEachTheirOwnEncodes) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const CodecSpec spec = codec::testing::Spec(GetParam());
  constexpr int kInFlight = 4, kBad = 2;
  const Shape shape{7, 33};
  const uint64_t n = shape.rows * shape.cols;
  CudaStream stream;
  DeviceBuffer checks(kInFlight * sizeof(EncodeCheck));
  ASSERT_EQ(cudaMemset(checks.get(), 0xFF, kInFlight * sizeof(EncodeCheck)), cudaSuccess);
  auto* device_checks = reinterpret_cast<EncodeCheck*>(checks.get());
  std::vector<std::vector<float>> xs;
  std::vector<std::unique_ptr<DeviceBuffer>> x_bufs;
  std::vector<std::unique_ptr<DeviceEncoded>> outs;
  for (int i = 0; i < kInFlight; ++i) {
    xs.push_back(TestData(shape.rows, shape.cols, 20 + i));
    if (i == kBad) xs.back()[n / 2] = std::numeric_limits<float>::quiet_NaN();
    x_bufs.push_back(std::make_unique<DeviceBuffer>(n * sizeof(float)));
    Upload(x_bufs.back()->get(), xs.back().data(), n * sizeof(float));
    outs.push_back(std::make_unique<DeviceEncoded>(
        codec::ComputeLayout(spec, shape.rows, shape.cols).value(), 0, 0));
    const RngKey key{.tensor = kKey.tensor + i, .step = kKey.step, .rank = kKey.rank};
    ASSERT_TRUE(EncodeCudaAsync(x_bufs.back()->floats(), outs.back()->view(spec), key, stream.get(),
                                device_checks + i)
                    .ok());
  }
  std::vector<EncodeCheck> host(kInFlight);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device_checks, kInFlight * sizeof(EncodeCheck),
                            cudaMemcpyDeviceToHost, stream.get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  for (int i = 0; i < kInFlight; ++i) {
    const absl::Status s = EncodeCheckStatus(host[i], shape.rows, shape.cols);
    if (i == kBad) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("EncodeCuda: the input holds NaN or Inf (7 x 33"));
      continue;
    }
    EXPECT_TRUE(s.ok()) << "encode " << i << ": " << s;
    auto cpu = EncodedTensor::Create(spec, shape.rows, shape.cols).value();
    const RngKey key{.tensor = kKey.tensor + i, .step = kKey.step, .rank = kKey.rank};
    ASSERT_TRUE(codec::Encode(xs[i].data(), cpu.mutable_view(), key).ok());
    const codec::EncodedLayout& l = cpu.layout();
    EXPECT_TRUE(SameBytes(cpu.codes(), Download<uint8_t>(outs[i]->codes, l.code_bytes))) << i;
    EXPECT_TRUE(SameBytes(cpu.scales(), Download<uint8_t>(outs[i]->scales, l.scale_bytes))) << i;
    // The asynchronous decode of them is the CPU's decode.
    DeviceBuffer decoded(n * sizeof(float));
    ASSERT_TRUE(DecodeCudaAsync(outs[i]->view(spec), decoded.floats(), false, stream.get()).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    std::vector<float> want(n);
    ASSERT_TRUE(codec::Decode(cpu.view(), want.data()).ok());
    EXPECT_TRUE(SameFloatBits(want, Download<float>(decoded.get(), n))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, CodecCudaAsyncTest,
                         ::testing::ValuesIn(codec::testing::AllSpecNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return SpecParamName(info.param);
                         });

TEST(CodecCudaAsync, EmptyTensorsClearTheirCheckAndArgumentsAreChecked) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer check(sizeof(EncodeCheck));
  ASSERT_EQ(cudaMemset(check.get(), 0xFF, sizeof(EncodeCheck)), cudaSuccess);
  auto* device_check = reinterpret_cast<EncodeCheck*>(check.get());
  const CodecSpec spec = codec::testing::Spec("e4m3/block32");
  const MutableEncodedView empty{spec, 0, 17, nullptr, nullptr};
  ASSERT_TRUE(EncodeCudaAsync(nullptr, empty, kKey, nullptr, device_check).ok());
  EncodeCheck host;
  ASSERT_EQ(cudaMemcpy(&host, device_check, sizeof(host), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(EncodeCheckStatus(host, 0, 17).ok());
  EXPECT_EQ(EncodeCudaAsync(nullptr, empty, kKey, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const MutableEncodedView unbuffered{spec, 2, 32, nullptr, nullptr};
  EXPECT_EQ(EncodeCudaAsync(check.floats(), unbuffered, kKey, nullptr, device_check).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeCudaAsync(unbuffered, check.floats(), false, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- argument errors ---------------------------------------------------------------------

TEST(CodecCudaArguments, InvalidSpecsAndEmptyTensors) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer buf(1024);
  float* dx = buf.floats();
  // bf16 and fp32 take no scaling; e4m3 blocks must be 32 or 128.
  for (const CodecSpec& bad : {CodecSpec{codec::Format::kBf16, codec::Scaling::kPerTensor, 0,
                                         codec::Rounding::kNearestEven},
                               CodecSpec{codec::Format::kF32, codec::Scaling::kPerTensor, 0,
                                         codec::Rounding::kNearestEven},
                               CodecSpec{codec::Format::kE4M3, codec::Scaling::kPerBlockFp32, 64,
                                         codec::Rounding::kNearestEven}}) {
    const MutableEncodedView out{bad, 2, 8, buf.get(), buf.get() + 512};
    EXPECT_EQ(EncodeCuda(dx, out, kKey, nullptr).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeCuda(out, dx, false, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
  // An empty tensor is fine with null buffers and writes nothing.
  for (const std::string& name : codec::testing::AllSpecNames()) {
    const MutableEncodedView empty{codec::testing::Spec(name), 0, 17, nullptr, nullptr};
    EXPECT_TRUE(EncodeCuda(nullptr, empty, kKey, nullptr).ok()) << name;
    EXPECT_TRUE(DecodeCuda(empty, nullptr, true, nullptr).ok()) << name;
  }
}

// ---- reduce ---------------------------------------------------------------------------

// Mixed input specs (cycled) and output specs ("" = sum only).
const char* const kReduceInputSpecs[] = {"e4m3/block32",  "bf16",      "e5m2/tensor/sr", "nvfp4",
                                         "e4m3/mx128/sr", "e5m2/none", "nvfp4/sr",       "fp32"};
const char* const kReduceOutputSpecs[] = {
    "", "e5m2/block128/sr", "nvfp4/sr", "e4m3/tensor", "bf16/sr", "fp32"};

using ReduceParam = std::tuple<int, float, Shape, const char*>;

class CodecCudaReduceTest : public ::testing::TestWithParam<ReduceParam> {};

TEST_P(CodecCudaReduceTest, MatchesCpuBitForBit) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const auto& [num_inputs, post_scale, shape, out_spec] = GetParam();
  const std::string out_name = out_spec;
  const uint64_t n = shape.rows * shape.cols;
  CudaStream stream;

  // Inputs encoded on the CPU, copied to the device.
  std::vector<EncodedTensor> cpu_inputs;
  std::vector<std::unique_ptr<DeviceEncoded>> gpu_inputs;
  std::vector<EncodedView> cpu_views, gpu_views;
  for (int k = 0; k < num_inputs; ++k) {
    const CodecSpec spec =
        codec::testing::Spec(kReduceInputSpecs[(k + num_inputs) % std::size(kReduceInputSpecs)]);
    const std::vector<float> x = TestData(shape.rows, shape.cols, 40 + k, /*huge=*/false);
    auto t = EncodedTensor::Create(spec, shape.rows, shape.cols);
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(codec::Encode(x.data(), t->mutable_view(),
                              RngKey{.tensor = 9, .step = 3, .rank = static_cast<uint32_t>(k)})
                    .ok());
    auto d = std::make_unique<DeviceEncoded>(t->layout(), 0, 0);
    Upload(d->codes, t->codes().data(), t->layout().code_bytes);
    Upload(d->scales, t->scales().data(), t->layout().scale_bytes);
    gpu_views.push_back(d->view(spec));
    gpu_inputs.push_back(std::move(d));
    cpu_inputs.push_back(std::move(*t));
  }
  for (const EncodedTensor& t : cpu_inputs) cpu_views.push_back(t.view());

  // CPU reference.
  std::vector<float> cpu_sum(n);
  std::optional<EncodedTensor> cpu_out;
  MutableEncodedView cpu_out_view;
  if (!out_name.empty()) {
    auto t = EncodedTensor::Create(codec::testing::Spec(out_name), shape.rows, shape.cols);
    ASSERT_TRUE(t.ok());
    cpu_out.emplace(std::move(*t));
    cpu_out_view = cpu_out->mutable_view();
  }
  ASSERT_TRUE(codec::ReduceEncoded(cpu_views, cpu_sum.data(), post_scale, cpu_out_view, kKey).ok());

  // GPU.
  DeviceBuffer sum_buf(n * sizeof(float));
  float* dsum = sum_buf.floats();
  std::unique_ptr<DeviceEncoded> gpu_out;
  MutableEncodedView gpu_out_view;
  if (cpu_out.has_value()) {
    gpu_out = std::make_unique<DeviceEncoded>(cpu_out->layout(), 0, 0);
    gpu_out_view = gpu_out->view(cpu_out->spec());
  }
  const absl::Status s = ReduceCuda(gpu_views, dsum, post_scale, gpu_out_view, kKey, stream.get());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(SameFloatBits(cpu_sum, Download<float>(dsum, n))) << "sum";
  if (cpu_out.has_value()) {
    const codec::EncodedLayout& l = cpu_out->layout();
    EXPECT_TRUE(SameBytes(cpu_out->codes(), Download<uint8_t>(gpu_out->codes, l.code_bytes)))
        << "codes";
    EXPECT_TRUE(SameBytes(cpu_out->scales(), Download<uint8_t>(gpu_out->scales, l.scale_bytes)))
        << "scales";
  }
}

const Shape kReduceShapes[] = {{1, 1}, {7, 33}, {3, 129}, {64, 1000}};

INSTANTIATE_TEST_SUITE_P(
    Mixed, CodecCudaReduceTest,
    ::testing::Combine(::testing::Values(1, 2, 5), ::testing::Values(1.0f, 0.25f),
                       ::testing::ValuesIn(kReduceShapes), ::testing::ValuesIn(kReduceOutputSpecs)),
    [](const ::testing::TestParamInfo<ReduceParam>& info) {
      const std::string out_name = std::get<3>(info.param);
      return absl::StrCat("n", std::get<0>(info.param), "_ps",
                          std::get<1>(info.param) == 1.0f ? "1" : "0_25", "_",
                          ShapeName(std::get<2>(info.param)), "_",
                          out_name.empty() ? std::string("sum_only") : SpecParamName(out_name));
    });

// The FP32 baseline: P fp32 contributions averaged with post_scale 1/P give
// ((g0 + g1) + g2) + ... times 1/P, bit for bit, in the sum and in the fp32
// re-encoding (a copy), on the GPU as on the CPU.
TEST(CodecCudaReduce, Fp32AverageIsTheSequentialSum) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const CodecSpec fp32 = codec::testing::Spec("fp32");
  const Shape shape{5, 1003};
  const uint64_t n = shape.rows * shape.cols;
  CudaStream stream;
  for (int p : {3, 4}) {
    std::vector<std::vector<float>> g;
    std::vector<std::unique_ptr<DeviceEncoded>> inputs;
    std::vector<EncodedView> views;
    for (int k = 0; k < p; ++k) {
      g.push_back(TestData(shape.rows, shape.cols, 60 + k, /*huge=*/false));
      auto t = EncodedTensor::Create(fp32, shape.rows, shape.cols).value();
      auto d = std::make_unique<DeviceEncoded>(t.layout(), 0, 0);
      DeviceBuffer x_buf(n * sizeof(float));
      Upload(x_buf.get(), g.back().data(), n * sizeof(float));
      ASSERT_TRUE(EncodeCuda(x_buf.floats(), d->view(fp32), kKey, stream.get()).ok());
      // The GPU's codes are the input's bits.
      EXPECT_TRUE(SameFloatBits(g.back(), Download<float>(d->codes, n))) << "encode " << k;
      views.push_back(d->view(fp32));
      inputs.push_back(std::move(d));
    }
    const float post_scale = 1.0f / static_cast<float>(p);
    std::vector<float> want(n);
    for (uint64_t i = 0; i < n; ++i) {
      float s = g[0][i];
      for (int k = 1; k < p; ++k) s = s + g[k][i];
      want[i] = s * post_scale;
    }
    DeviceBuffer sum_buf(n * sizeof(float));
    auto out_layout = codec::ComputeLayout(fp32, shape.rows, shape.cols).value();
    DeviceEncoded out(out_layout, 0, 0);
    const absl::Status s =
        ReduceCuda(views, sum_buf.floats(), post_scale, out.view(fp32), kKey, stream.get());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(SameFloatBits(want, Download<float>(sum_buf.floats(), n))) << "sum, P=" << p;
    EXPECT_TRUE(SameFloatBits(want, Download<float>(out.codes, n))) << "codes, P=" << p;
  }
}

TEST(CodecCudaReduce, RefusesBadArguments) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const CodecSpec spec = codec::testing::Spec("e4m3/tensor");
  DeviceBuffer buf(4096);
  float* dsum = reinterpret_cast<float*>(buf.get() + 2048);
  const EncodedView a{spec, 4, 8, buf.get(), buf.get() + 64};
  const EncodedView b{spec, 8, 4, buf.get(), buf.get() + 64};
  const MutableEncodedView no_out{};
  // No inputs.
  EXPECT_EQ(ReduceCuda({}, dsum, 1.0f, no_out, kKey, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Shapes differ between inputs ...
  const std::vector<EncodedView> mismatched = {a, b};
  EXPECT_EQ(ReduceCuda(mismatched, dsum, 1.0f, no_out, kKey, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // ... or between the inputs and the output.
  const std::vector<EncodedView> one = {a};
  const MutableEncodedView wrong_out{spec, 8, 4, buf.get() + 1024, buf.get() + 1536};
  EXPECT_EQ(ReduceCuda(one, dsum, 1.0f, wrong_out, kKey, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::kernels
