// The fused forward transform + encode (kernels/transform/
// forward_encode_cuda.h): its codes and scales bit for bit against the
// unfused path with the same arithmetic (ForwardFixedOrder, then EncodeCuda
// on the GPU and the CPU codec's Encode of the downloaded tensor), and that
// transform against the CPU TensorBasis and TensorBasisCuda::Forward within
// transform_cuda_test.cc's tolerances (cuBLAS's and the CPU's orders of
// summation differ from the fused kernel's, so those are not bit for bit).
// Against the whole CPU pipeline (CPU TensorBasis + CPU Encode) the codes
// agree except where a value lies within that tolerance of a rounding
// boundary, and the quantization error is the CPU's.
//
// Every GPU test skips without a CUDA device. The same file is built as
// forward_encode_cuda_emulated_test over the host emulation of CUDA
// (cuda_host_emulation.h), where it runs everywhere.
#include "kernels/transform/forward_encode_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/relative_error.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "common/transform/tensor_basis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/codec/codec_cuda.h"
#include "kernels/transform/transform_cuda.h"
#include "tests/kernels/transform_cuda_test_util.h"
#include "tests/transform/test_util.h"

namespace gift::kernels {
namespace {

using ::testing::HasSubstr;
using transform::ResidualModel;
using transform::Sides;
using transform::TensorBasis;
using transform::testing::AnisotropicMatrix;
using namespace cuda_test;  // NOLINT: the shared GPU test helpers

constexpr double kFp32Tolerance = 1e-5;
constexpr double kFp32PerKappa = 1e-7;

// Device bytes, zero-filled.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(&ptr_, count > 0 ? count : 1), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(ptr_, 0, count > 0 ? count : 1, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t count_;
};

// An encoded tensor in device memory.
struct DeviceEncoded {
  DeviceEncoded(const codec::CodecSpec& spec, int64_t rows, int64_t cols)
      : layout(codec::ComputeLayout(spec, rows, cols).value()),
        codes(layout.code_bytes),
        scales(layout.scale_bytes),
        view{spec, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), codes.get(),
             scales.get()} {}
  codec::EncodedLayout layout;
  DeviceBytes codes, scales;
  codec::MutableEncodedView view;
};

struct Case {
  int64_t d_out, d_in, rank;
  Sides sides;
  const char* spec;
  size_t offset;  // floats into the input's allocation (1: not 16-byte aligned)
};

std::string CaseString(const Case& c) {
  const char* sides =
      c.sides == Sides::kInput ? "in" : (c.sides == Sides::kOutput ? "out" : "both");
  std::string spec = c.spec;
  std::replace(spec.begin(), spec.end(), '/', '_');
  return absl::StrCat(c.d_out, "x", c.d_in, "_r", c.rank, "_", sides, "_", spec, "_off",
                      c.offset);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return CaseString(info.param); }

void PrintTo(const Case& c, std::ostream* os) { *os << CaseString(c); }

std::vector<Case> AllCases() {
  struct Shape {
    int64_t d_out, d_in, rank;
  };
  // One tile; columns not a multiple of 4 (partial quads and blocks); rows
  // and columns over several 64 x 128 tiles with k = 40 > 32 (two chunks of
  // the rank-k product); a partial last block of 32.
  const Shape shapes[] = {{48, 80, 8}, {37, 61, 5}, {70, 300, 20}, {130, 129, 3}};
  const char* specs[] = {"e4m3/block128", "e4m3/block32", "e5m2/mx32", "e4m3/block128/sr"};
  std::vector<Case> cases;
  for (const Shape& s : shapes) {
    for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
      for (const char* spec : specs) cases.push_back({s.d_out, s.d_in, s.rank, sides, spec, 0});
    }
    cases.push_back({s.d_out, s.d_in, s.rank, Sides::kBoth, "e4m3/block128", 1});
  }
  return cases;
}

class ForwardEncodeCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardEncodeCudaTest, MatchesTheUnfusedPathBitForBit) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const codec::CodecSpec spec = codec::ParseCodecSpec(c.spec).value();
  ASSERT_TRUE(ForwardEncoderCuda::Supports(spec));
  const TensorBasis basis = MakeBasis(c.d_out, c.d_in, c.rank, ResidualModel::kDiagonal, c.sides,
                                      0.25);
  CudaStream stream;
  absl::StatusOr<TensorBasisCuda> gpu = TensorBasisCuda::Create(basis, stream.get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<ForwardEncoderCuda> fused = ForwardEncoderCuda::Create(&*gpu);
  ASSERT_TRUE(fused.ok()) << fused.status();
  const size_t size = static_cast<size_t>(c.d_out * c.d_in);
  const std::vector<float> g = AnisotropicMatrix(c.d_out, c.d_in, 3);
  DeviceFloats d_g(size, c.offset), d_fixed(size), d_cublas(size);
  d_g.Upload(g);
  const codec::RngKey key{.tensor = 7, .step = 11, .rank = 2};

  // Fused.
  DeviceEncoded got(spec, c.d_out, c.d_in);
  ASSERT_TRUE(fused->Encode(d_g.get(), c.d_out, c.d_in, got.view, key).ok());
  // Unfused, the same arithmetic: ForwardFixedOrder, then EncodeCuda.
  DeviceEncoded unfused(spec, c.d_out, c.d_in);
  ASSERT_TRUE(fused->ForwardFixedOrder(d_g.get(), c.d_out, c.d_in, d_fixed.get()).ok());
  ASSERT_TRUE(EncodeCuda(d_fixed.get(), unfused.view, key, stream.get()).ok());
  const std::vector<uint8_t> codes = got.codes.Download(), scales = got.scales.Download();
  EXPECT_EQ(codes, unfused.codes.Download());
  EXPECT_EQ(scales, unfused.scales.Download());
  // The CPU codec on the same FP32 tensor.
  const std::vector<float> fixed = d_fixed.Download(size);
  codec::EncodedTensor cpu_codes = codec::EncodedTensor::Create(spec, c.d_out, c.d_in).value();
  ASSERT_TRUE(codec::Encode(fixed.data(), cpu_codes.mutable_view(), key).ok());
  EXPECT_EQ(codes, cpu_codes.codes());
  EXPECT_EQ(scales, cpu_codes.scales());

  // The transform itself against the CPU (double) and cuBLAS's order.
  std::vector<float> cpu_fwd(size);
  ASSERT_TRUE(basis
                  .Forward(g.data(), c.d_out, c.d_in, cpu_fwd.data(),
                           transform::Precision::kFp64Reference)
                  .ok());
  ASSERT_TRUE(gpu->Forward(d_g.get(), c.d_out, c.d_in, d_cublas.get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  const double tolerance = std::max(kFp32Tolerance, kFp32PerKappa * Conditioning(basis));
  EXPECT_LE(RelativeL2(fixed, cpu_fwd), tolerance);
  // Both within `tolerance` of the CPU, so within twice that of each other.
  EXPECT_LE(RelativeL2(fixed, d_cublas.Download(size)), 2 * tolerance);

  // Against the CPU pipeline: nearly every code equal, the same error.
  codec::EncodedTensor cpu_pipeline = codec::EncodedTensor::Create(spec, c.d_out, c.d_in).value();
  ASSERT_TRUE(codec::Encode(cpu_fwd.data(), cpu_pipeline.mutable_view(), key).ok());
  size_t equal = 0;
  for (size_t i = 0; i < codes.size(); ++i) equal += codes[i] == cpu_pipeline.codes()[i];
  EXPECT_GE(static_cast<double>(equal), 0.99 * static_cast<double>(codes.size()));
  std::vector<float> fused_decoded(size), cpu_decoded(size);
  ASSERT_TRUE(codec::Decode(cpu_codes.view(), fused_decoded.data()).ok());
  ASSERT_TRUE(codec::Decode(cpu_pipeline.view(), cpu_decoded.data()).ok());
  const double cpu_error = RelativeL2(cpu_decoded, cpu_fwd);
  EXPECT_GT(cpu_error, 0.0);
  EXPECT_LE(RelativeL2(fused_decoded, cpu_fwd), 1.05 * cpu_error);
}

INSTANTIATE_TEST_SUITE_P(Bases, ForwardEncodeCudaTest, ::testing::ValuesIn(AllCases()), CaseName);

// ---- what it refuses -----------------------------------------------------------------

TEST(ForwardEncodeCudaSupports, BlockScaledEightBitCodecsOnly) {
  for (const char* yes : {"e4m3/block128", "e4m3/block32/sr", "e5m2/block128", "e4m3/mx32"}) {
    EXPECT_TRUE(ForwardEncoderCuda::Supports(codec::ParseCodecSpec(yes).value())) << yes;
  }
  for (const char* no : {"nvfp4", "e4m3/tensor", "e5m2/tensor/sr", "bf16", "fp32"}) {
    EXPECT_FALSE(ForwardEncoderCuda::Supports(codec::ParseCodecSpec(no).value())) << no;
  }
}

TEST(ForwardEncodeCudaApi, RefusesBadArgumentsAndNonFiniteInput) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const int64_t m = 16, n = 40;
  const TensorBasis basis = MakeBasis(m, n, 4, ResidualModel::kIsotropic, Sides::kBoth, 0.25);
  CudaStream stream;
  absl::StatusOr<TensorBasisCuda> gpu = TensorBasisCuda::Create(basis, stream.get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(ForwardEncoderCuda::Create(nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ForwardEncoderCuda> fused = ForwardEncoderCuda::Create(&*gpu);
  ASSERT_TRUE(fused.ok()) << fused.status();
  DeviceFloats d_g(m * n);
  std::vector<float> g = AnisotropicMatrix(m, n, 5);
  d_g.Upload(g);
  const codec::CodecSpec spec = codec::ParseCodecSpec("e4m3/block32").value();
  DeviceEncoded out(spec, m, n);

  const codec::CodecSpec nvfp4 = codec::ParseCodecSpec("nvfp4").value();
  DeviceEncoded out4(nvfp4, m, n);
  const absl::Status unsupported = fused->Encode(d_g.get(), m, n, out4.view, {});
  EXPECT_EQ(unsupported.code(), absl::StatusCode::kInvalidArgument) << unsupported;
  EXPECT_THAT(unsupported.message(), HasSubstr("EncodeCuda"));
  const absl::Status shape = fused->Encode(d_g.get(), n, m, out.view, {});
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape;
  EXPECT_EQ(fused->Encode(nullptr, m, n, out.view, {}).code(), absl::StatusCode::kInvalidArgument);
  codec::MutableEncodedView no_codes = out.view;
  no_codes.codes = nullptr;
  EXPECT_EQ(fused->Encode(d_g.get(), m, n, no_codes, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fused->ForwardFixedOrder(d_g.get(), m, n, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fused->ForwardFixedOrder(d_g.get(), m + 1, n, d_g.get()).code(),
            absl::StatusCode::kInvalidArgument);

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    g[m * n / 2] = bad;
    d_g.Upload(g);
    const absl::Status st = fused->Encode(d_g.get(), m, n, out.view, {});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(st.message(), HasSubstr("NaN or Inf"));
  }
  // A good call afterwards works again (the flag is cleared per call).
  g[m * n / 2] = 1.0f;
  d_g.Upload(g);
  EXPECT_TRUE(fused->Encode(d_g.get(), m, n, out.view, {}).ok());
}

}  // namespace
}  // namespace gift::kernels
