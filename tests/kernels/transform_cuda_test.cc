// The CUDA transform (kernels/transform/transform_cuda.h) against the CPU
// TensorBasis in double precision, and its scaling kernel against a CPU
// reference bit for bit.
//
// Tolerances (relative Frobenius error): kFp32 forward and inverse within
// 1e-5 of the CPU, the GPU forward -> inverse round trip within 1e-5 of the
// input; kTf32 within 5e-3 (TF32 keeps 10 mantissa bits). For an
// ill-conditioned basis the FP32 bound grows with the conditioning kappa =
// prod over sides of max_j (1 + Sig_j)^p (the forward shrinks span(Z) by up
// to that factor against the identity term, so FP32 cancellation costs
// about kappa ulps): the tolerance is max(1e-5, 1e-7 * kappa). Of the bases
// below only rank = n at p = 1/2 on both sides (kappa ~ 1e4) needs that.
//
// Every GPU test skips when no CUDA device is present; the no-device
// behaviour (FailedPrecondition, no crash) is tested everywhere. The same
// file is also built as transform_cuda_emulated_test, over the host
// emulation of the CUDA runtime, the kernel and the cuBLAS calls
// (cuda_host_emulation.h, cublas_host_emulation.cc), so that the call
// sequence and the kernel are checked on machines without a GPU too.
#include "kernels/transform/transform_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/transform/transform_kernels.h"
#include "tests/kernels/transform_cuda_test_util.h"
#include "tests/transform/test_util.h"

namespace gift::kernels {
namespace {

using ::testing::HasSubstr;
using transform::ResidualModel;
using transform::SideBasis;
using transform::SideBasisOptions;
using transform::Sides;
using transform::TensorBasis;
using transform::testing::AnisotropicMatrix;
using namespace cuda_test;  // NOLINT: the shared GPU test helpers

constexpr double kFp32Tolerance = 1e-5;
constexpr double kFp32PerKappa = 1e-7;
constexpr double kTf32Tolerance = 5e-3;

// Runs Forward (or Inverse) on the GPU on a copy of `x`, in place or not.
std::vector<float> RunOnGpu(TensorBasisCuda& gpu, const std::vector<float>& x, bool inverse,
                            bool in_place) {
  const int64_t m = gpu.d_out(), n = gpu.d_in();
  DeviceFloats in(x.size()), out(x.size());
  in.Upload(x);
  // NaN everywhere, so that an element left unwritten fails the comparison.
  EXPECT_EQ(cudaMemsetAsync(out.get(), 0xFF, x.size() * sizeof(float), nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  float* dst = in_place ? in.get() : out.get();
  const absl::Status st =
      inverse ? gpu.Inverse(in.get(), m, n, dst) : gpu.Forward(in.get(), m, n, dst);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaStreamSynchronize(gpu.stream()), cudaSuccess);
  return in_place ? in.Download(x.size()) : out.Download(x.size());
}

// ---- no device ------------------------------------------------------------------

TEST(TransformCudaNoDevice, CreateFailsWithAStatusInsteadOfCrashing) {
  const TensorBasis basis = MakeBasis(8, 12, 2, ResidualModel::kIsotropic, Sides::kBoth, 0.25);
  const absl::StatusOr<TensorBasisCuda> gpu = TensorBasisCuda::Create(basis, nullptr);
  if (!HaveDevice()) {
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
    EXPECT_THAT(gpu.status().message(), HasSubstr("no CUDA device"));
  } else {
    EXPECT_TRUE(gpu.ok()) << gpu.status();
  }
}

// ---- against the CPU --------------------------------------------------------------

struct Case {
  int64_t d_out, d_in, rank;
  ResidualModel residual;
  Sides sides;
  double p;
};

std::string CaseString(const Case& c) {
  const char* sides =
      c.sides == Sides::kInput ? "in" : (c.sides == Sides::kOutput ? "out" : "both");
  return absl::StrCat(c.d_out, "x", c.d_in, "_r", c.rank, "_",
                      c.residual == ResidualModel::kIsotropic ? "iso" : "diag", "_", sides, "_p",
                      static_cast<int>(1.0 / c.p));
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return CaseString(info.param); }

void PrintTo(const Case& c, std::ostream* os) { *os << CaseString(c); }

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  struct Shape {
    int64_t d_out, d_in, rank;
  };
  // Non-multiples of 32 and of 4 (the kernel's scalar path), rank 1, and
  // rank = n on both sides (20 x 20 at rank 20).
  const Shape shapes[] = {{48, 80, 8}, {37, 61, 5}, {70, 33, 1}, {20, 20, 20}};
  for (const Shape& s : shapes) {
    for (ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
      for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
        for (double p : {0.125, 0.25, 0.5}) {
          cases.push_back({s.d_out, s.d_in, s.rank, residual, sides, p});
        }
      }
    }
  }
  return cases;
}

class TransformCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(TransformCudaTest, AgreesWithCpuAndRoundTrips) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const TensorBasis basis = MakeBasis(c.d_out, c.d_in, c.rank, c.residual, c.sides, c.p);
  CudaStream stream;
  absl::StatusOr<TensorBasisCuda> gpu = TensorBasisCuda::Create(basis, stream.get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const size_t size = static_cast<size_t>(c.d_out * c.d_in);
  const std::vector<float> g = AnisotropicMatrix(c.d_out, c.d_in, 3);

  std::vector<float> cpu_fwd(size), cpu_inv(size);
  ASSERT_TRUE(
      basis.Forward(g.data(), c.d_out, c.d_in, cpu_fwd.data(), transform::Precision::kFp64Reference)
          .ok());
  ASSERT_TRUE(
      basis.Inverse(g.data(), c.d_out, c.d_in, cpu_inv.data(), transform::Precision::kFp64Reference)
          .ok());
  const double kappa = Conditioning(basis);
  const double tolerance = std::max(kFp32Tolerance, kFp32PerKappa * kappa);
  SCOPED_TRACE(absl::StrCat("kappa ", kappa, ", tolerance ", tolerance));

  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const std::vector<float> fwd = RunOnGpu(*gpu, g, /*inverse=*/false, in_place);
    EXPECT_LE(RelativeL2(fwd, cpu_fwd), tolerance);
    EXPECT_LE(RelativeL2(RunOnGpu(*gpu, g, /*inverse=*/true, in_place), cpu_inv), tolerance);
    EXPECT_LE(RelativeL2(RunOnGpu(*gpu, fwd, /*inverse=*/true, in_place), g), tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Bases, TransformCudaTest, ::testing::ValuesIn(AllCases()), CaseName);

TEST(TransformCudaTf32, AgreesWithCpuWithinTf32Tolerance) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const int64_t m = 96, n = 130;
  for (ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
    const TensorBasis basis = MakeBasis(m, n, 16, residual, Sides::kBoth, 0.25);
    CudaStream stream;
    absl::StatusOr<TensorBasisCuda> gpu =
        TensorBasisCuda::Create(basis, stream.get(), TransformMath::kTf32);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const std::vector<float> g = AnisotropicMatrix(m, n, 5);
    std::vector<float> cpu_fwd(m * n), cpu_inv(m * n);
    ASSERT_TRUE(
        basis.Forward(g.data(), m, n, cpu_fwd.data(), transform::Precision::kFp64Reference).ok());
    ASSERT_TRUE(
        basis.Inverse(g.data(), m, n, cpu_inv.data(), transform::Precision::kFp64Reference).ok());
    const std::vector<float> fwd = RunOnGpu(*gpu, g, /*inverse=*/false, /*in_place=*/false);
    const double fwd_err = RelativeL2(fwd, cpu_fwd);
    EXPECT_LE(fwd_err, kTf32Tolerance);
    EXPECT_LE(RelativeL2(RunOnGpu(*gpu, g, true, false), cpu_inv), kTf32Tolerance);
    EXPECT_LE(RelativeL2(RunOnGpu(*gpu, fwd, true, false), g), kTf32Tolerance);
  }
}

// A basis moved into another object keeps working; the moved-from one is
// only destroyed.
TEST(TransformCudaApi, MovedObjectKeepsItsBasis) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const TensorBasis basis = MakeBasis(24, 40, 4, ResidualModel::kDiagonal, Sides::kBoth, 0.25);
  CudaStream stream;
  absl::StatusOr<TensorBasisCuda> created = TensorBasisCuda::Create(basis, stream.get());
  ASSERT_TRUE(created.ok()) << created.status();
  TensorBasisCuda gpu = *std::move(created);
  EXPECT_EQ(gpu.d_out(), 24);
  EXPECT_EQ(gpu.d_in(), 40);
  EXPECT_EQ(gpu.stream(), stream.get());
  const std::vector<float> g = AnisotropicMatrix(24, 40, 9);
  std::vector<float> cpu(g.size());
  ASSERT_TRUE(
      basis.Forward(g.data(), 24, 40, cpu.data(), transform::Precision::kFp64Reference).ok());
  EXPECT_LE(RelativeL2(RunOnGpu(gpu, g, false, false), cpu), kFp32Tolerance);
}

TEST(TransformCudaApi, RefusesBadArguments) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const TensorBasis basis = MakeBasis(16, 24, 4, ResidualModel::kIsotropic, Sides::kBoth, 0.25);
  CudaStream stream;
  absl::StatusOr<TensorBasisCuda> gpu = TensorBasisCuda::Create(basis, stream.get());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  DeviceFloats buf(16 * 24);
  for (bool inverse : {false, true}) {
    auto call = [&](const float* in, int64_t m, int64_t n, float* out) {
      return inverse ? gpu->Inverse(in, m, n, out) : gpu->Forward(in, m, n, out);
    };
    const absl::Status shape = call(buf.get(), 24, 16, buf.get());
    EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape;
    EXPECT_THAT(shape.message(), HasSubstr("24x16"));
    EXPECT_EQ(call(buf.get(), 16, 25, buf.get()).code(), absl::StatusCode::kInvalidArgument);
    const absl::Status null_in = call(nullptr, 16, 24, buf.get());
    EXPECT_EQ(null_in.code(), absl::StatusCode::kInvalidArgument) << null_in;
    EXPECT_THAT(null_in.message(), HasSubstr("null"));
    EXPECT_EQ(call(buf.get(), 16, 24, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
}

// ---- the scaling kernel, bit for bit ---------------------------------------------

std::vector<float> ScaleOuterReference(const std::vector<float>& x, uint64_t rows, uint64_t cols,
                                       const std::vector<float>* row_scale,
                                       const std::vector<float>* col_scale) {
  std::vector<float> out(x.size());
  for (uint64_t i = 0; i < rows; ++i) {
    for (uint64_t j = 0; j < cols; ++j) {
      float v = x[i * cols + j];
      if (row_scale != nullptr) v = v * (*row_scale)[i];
      if (col_scale != nullptr) v = v * (*col_scale)[j];
      out[i * cols + j] = v;
    }
  }
  return out;
}

TEST(TransformCudaKernel, ScaleOuterMatchesCpuBitForBit) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  CudaStream stream;
  struct Shape {
    uint64_t rows, cols;
  };
  // Vectorized (cols % 4 == 0) and scalar paths, rows beyond the grid, a
  // long row; offsets 0 and 1 (misaligned: scalar path).
  for (const Shape s : {Shape{3, 8}, Shape{5, 37}, Shape{40, 4}, Shape{2, 1030}, Shape{1, 1}}) {
    const size_t size = s.rows * s.cols;
    const std::vector<float> x = AnisotropicMatrix(s.rows, s.cols, 11);
    // Scales over several decades, with denormal products in reach.
    std::vector<float> rs(s.rows), cs(s.cols);
    for (uint64_t i = 0; i < s.rows; ++i) rs[i] = 0.37f * static_cast<float>(i + 1) * 1e-20f;
    for (uint64_t j = 0; j < s.cols; ++j) cs[j] = 3.1f / static_cast<float>(j + 1) * 1e-19f;
    for (size_t offset : {size_t{0}, size_t{1}}) {
      DeviceFloats in(size, offset), out(size, offset), d_rs(s.rows), d_cs(s.cols);
      in.Upload(x);
      d_rs.Upload(rs);
      d_cs.Upload(cs);
      for (int mode = 0; mode < 4; ++mode) {
        SCOPED_TRACE(absl::StrCat(s.rows, "x", s.cols, " offset ", offset, " mode ", mode));
        const bool use_rs = mode & 1, use_cs = mode & 2;
        internal::ScaleOuterArgs args;
        args.in = in.get();
        args.out = out.get();
        args.rows = s.rows;
        args.cols = s.cols;
        args.row_scale = use_rs ? d_rs.get() : nullptr;
        args.col_scale = use_cs ? d_cs.get() : nullptr;
        // NaN everywhere, so that an element left unwritten fails the comparison.
        ASSERT_EQ(cudaMemsetAsync(out.get(), 0xFF, size * sizeof(float), stream.get()),
                  cudaSuccess);
        ASSERT_EQ(internal::EnqueueScaleOuter(args, stream.get()), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
        const std::vector<float> want =
            ScaleOuterReference(x, s.rows, s.cols, use_rs ? &rs : nullptr, use_cs ? &cs : nullptr);
        const std::vector<float> got = out.Download(size);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), size * sizeof(float)), 0);
      }
    }
  }
}

}  // namespace
}  // namespace gift::kernels
