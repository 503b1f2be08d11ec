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

// ---- helpers ----------------------------------------------------------------------

// Device memory: `bytes` usable bytes starting `offset` bytes into the
// allocation (an odd offset gives a misaligned buffer). Exactly
// offset + bytes are allocated, so that a memory checker (the emulated build
// under AddressSanitizer) sees any access past the end.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset = 0) : offset_(offset) {
    EXPECT_EQ(cudaMalloc(&ptr_, offset + bytes), cudaSuccess);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_) + offset_; }
  float* floats() const { return reinterpret_cast<float*>(get()); }

 private:
  void* ptr_ = nullptr;
  size_t offset_;
};

void Upload(void* device, const void* host, size_t bytes) {
  if (bytes > 0) {
    ASSERT_EQ(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
}

template <typename T>
std::vector<T> Download(const void* device, size_t count) {
  std::vector<T> host(count);
  if (count > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return host;
}

::testing::AssertionResult SameBytes(const std::vector<uint8_t>& want,
                                     const std::vector<uint8_t>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " vs " << got.size();
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t first = 0, count = 0;
  for (size_t i = want.size(); i-- > 0;) {
    if (want[i] != got[i]) {
      first = i;
      ++count;
    }
  }
  return ::testing::AssertionFailure()
         << count << " of " << want.size() << " bytes differ; first at " << first << ": cpu 0x"
         << std::hex << int{want[first]} << ", gpu 0x" << int{got[first]};
}

::testing::AssertionResult SameFloatBits(const std::vector<float>& want,
                                         const std::vector<float>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " vs " << got.size();
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t first = 0, count = 0;
  for (size_t i = want.size(); i-- > 0;) {
    if (Bits(want[i]) != Bits(got[i])) {
      first = i;
      ++count;
    }
  }
  return ::testing::AssertionFailure()
         << count << " of " << want.size() << " floats differ; first at " << first << ": cpu "
         << want[first] << " (0x" << std::hex << Bits(want[first]) << "), gpu " << std::dec
         << got[first] << " (0x" << std::hex << Bits(got[first]) << ")";
}

// Gradient-like data over ~7 decades with zeros, -0.0 and denormals
// (codec::testing::GradientLike), plus: an all-zero row, a block of
// denormals only, values at and near every format's max and an E4M3 tie.
// With `huge`, tensors of more than 1000 elements also get 1e30 and -3e38,
// which saturate the unscaled formats (kept out of small tensors, where they
// would flush everything else to zero under per-tensor scaling).
std::vector<float> TestData(uint64_t rows, uint64_t cols, uint32_t seed, bool huge = true) {
  std::vector<float> x = codec::testing::GradientLike(rows, cols, seed);
  const uint64_t n = rows * cols;
  if (n == 0) return x;
  if (rows >= 3) {
    for (uint64_t c = 0; c < cols; ++c) x[1 * cols + c] = 0.0f;
    for (uint64_t c = 16; c < std::min<uint64_t>(cols, 48); ++c) {
      x[2 * cols + c] =
          FromBits(static_cast<uint32_t>(1 + 9973 * c) & 0x7FFFFFu) * (c % 2 ? -1.0f : 1.0f);
    }
  }
  const float specials[] = {448.0f, -447.5f, 464.0f,   -57344.0f, 57000.0f, 6.0f,    -5.5f,
                            0.0f,   -0.0f,   1.5e-45f, -1.0e-38f, 240.0f,   65504.0f};
  uint64_t at = (static_cast<uint64_t>(seed) * 7919u + 3) % n;
  for (const float v : specials) {
    x[at] = v;
    at = (at + 104729u) % n;
  }
  if (huge && n > 1000) {
    x[n / 3] = 1e30f;
    x[n / 2 + 1] = -3e38f;
  }
  return x;
}

struct Shape {
  uint64_t rows;
  uint64_t cols;
};

std::string ShapeName(const Shape& s) { return absl::StrCat(s.rows, "x", s.cols); }

void PrintTo(const Shape& s, std::ostream* os) { *os << ShapeName(s); }

std::string SpecParamName(const std::string& spec) {
  return absl::StrReplaceAll(spec, {{"/", "_"}});
}

// Encoded buffers on the device, optionally at odd offsets from the
// allocation (to exercise the unaligned paths).
struct DeviceEncoded {
  DeviceEncoded(const codec::EncodedLayout& layout, size_t code_offset, size_t scale_offset)
      : codes_buf(layout.code_bytes, code_offset),
        scales_buf(layout.scale_bytes, scale_offset),
        layout(layout),
        codes(codes_buf.get()),
        scales(scales_buf.get()) {}

  MutableEncodedView view(const CodecSpec& spec) const {
    return MutableEncodedView{spec, layout.rows, layout.cols, codes, scales};
  }

  DeviceBuffer codes_buf;
  DeviceBuffer scales_buf;
  codec::EncodedLayout layout;
  uint8_t* codes;
  uint8_t* scales;
};

class CudaStream {
 public:
  CudaStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess); }
  ~CudaStream() { cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

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
