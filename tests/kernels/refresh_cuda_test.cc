// The GPU refresh (kernels/transform/refresh_cuda.h) against the CPU path
// (SecondMomentEma, TopEigenpairs, SideBasis::FromFactor, TensorBasis) on
// skinny, wide and square shapes, step by step over several gradients.
//
// The GPU works in FP32 where the CPU works in double, so nothing is
// compared bit for bit. Tolerances:
//   statistics: relative Frobenius error <= 1e-5 after every step (FP32
//     sums of up to 512 products, ~2^-24 sqrt(512) ~ 1e-6, with margin);
//   trace: relative 1e-5; eigenvalues: |lam_gpu - lam_cpu| <= 1e-4 lam_max
//     (FP32 statistics resolve eigenvalues to ~1e-6 of the largest; the
//     randomized steps, the same Gaussian sketch on both, add rounding only);
//   subspaces (eigenvectors up to sign and rotation within clusters): where
//     the spectrum has a gap at the rank, the projectors U U^T differ by at
//     most 1e-4 in Frobenius norm (Davis-Kahan: perturbation / gap);
//   the bases' action: T(G) of the GPU-built TensorBasis against the CPU
//     one's, both applied on the CPU, relative Frobenius <= 1e-3, and
//     forward -> inverse with the GPU basis returns G (that is the
//     basis's own exactness, checked within 1e-5).
// Measured over the host emulation (FP32 sums in index order, Eigen's FP32
// factorizations): statistics <= 3.2e-7, eigenvalues <= 1.8e-6 of the
// largest, projectors <= 3.9e-6, action <= 3.5e-5, round trip <= 5.9e-7, so
// the tolerances leave 15x to 60x for cuBLAS's and cuSOLVER's own orders.
// Every GPU test skips without a CUDA device; the no-device refusal is
// tested everywhere. Built a second time as refresh_cuda_emulated_test over
// the host emulation of the runtime, cuBLAS and cuSOLVER
// (cublas_host_emulation.cc, cusolver_host_emulation.cc), so that the call
// sequence runs against the CPU on machines without a GPU too.
#include "kernels/transform/refresh_cuda.h"

#include <cuda_runtime_api.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/transform/low_rank_eigen.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/transform/cublas_handle.h"
#include "tests/kernels/transform_cuda_test_util.h"
#include "tests/transform/test_util.h"

namespace gift::kernels {
namespace {

using ::testing::HasSubstr;
using transform::LowRankEigenOptions;
using transform::LowRankEigenpairs;
using transform::ResidualModel;
using transform::SecondMomentEma;
using transform::SideBasis;
using transform::SideBasisOptions;
using transform::Sides;
using transform::TensorBasis;
using transform::TensorBasisHeader;
using transform::testing::AnisotropicMatrix;
using transform::testing::FactorWithSpectrum;
using transform::testing::SharedPlusNoiseGradients;
using namespace cuda_test;  // NOLINT: the shared GPU test helpers

constexpr double kStatisticsTolerance = 1e-5;
constexpr double kTraceTolerance = 1e-5;
constexpr double kEigenvalueTolerance = 1e-4;  // of the largest eigenvalue
constexpr double kProjectorTolerance = 1e-4;
constexpr double kActionTolerance = 1e-3;
constexpr double kRoundTripTolerance = 1e-5;

// A stream and both handles bound to it.
class Handles {
 public:
  Handles() {
    EXPECT_TRUE(blas_.Init(stream_.get()).ok());
    EXPECT_TRUE(solver_.Init(stream_.get()).ok());
  }
  RefreshHandles get() const { return {stream_.get(), blas_.get(), solver_.get()}; }

 private:
  CudaStream stream_;
  CublasHandle blas_;
  CusolverHandle solver_;
};

double RelativeFrobenius(const Eigen::MatrixXd& got, const Eigen::MatrixXd& want) {
  return (got - want).norm() / want.norm();
}

double ProjectorDistance(const Eigen::MatrixXd& u, const Eigen::MatrixXd& v) {
  return (u * u.transpose() - v * v.transpose()).norm();
}

// A symmetric matrix as column-major FP32 (the device layout).
std::vector<float> ToDeviceLayout(const Eigen::MatrixXd& a) {
  std::vector<float> out(a.size());
  for (Eigen::Index i = 0; i < a.size(); ++i) out[i] = static_cast<float>(a.data()[i]);
  return out;
}

std::vector<float> Apply(const TensorBasis& basis, const std::vector<float>& g, bool inverse) {
  const TensorBasisHeader& h = basis.header();
  std::vector<float> out(g.size());
  const absl::Status s = inverse ? basis.Inverse(g.data(), h.d_out, h.d_in, out.data())
                                 : basis.Forward(g.data(), h.d_out, h.d_in, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectEigenpairsMatch(const LowRankEigenpairs& gpu, const LowRankEigenpairs& cpu,
                           bool check_subspace) {
  ASSERT_EQ(gpu.vectors.rows(), cpu.vectors.rows());
  ASSERT_EQ(gpu.values.size(), cpu.values.size());
  EXPECT_NEAR(gpu.trace, cpu.trace, kTraceTolerance * cpu.trace);
  const double lam_max = cpu.values(0);
  EXPECT_LE((gpu.values - cpu.values).cwiseAbs().maxCoeff(), kEigenvalueTolerance * lam_max)
      << "gpu " << gpu.values.head(std::min<Eigen::Index>(4, gpu.values.size())).transpose()
      << " cpu " << cpu.values.head(std::min<Eigen::Index>(4, cpu.values.size())).transpose();
  const Eigen::MatrixXd gram = gpu.vectors.transpose() * gpu.vectors;
  EXPECT_LE((gram - Eigen::MatrixXd::Identity(gram.rows(), gram.cols())).norm(), 1e-12);
  if (check_subspace) {
    EXPECT_LE(ProjectorDistance(gpu.vectors, cpu.vectors), kProjectorTolerance);
  }
}

// ---- no device / bad input ----------------------------------------------------------

TEST(RefreshCudaNoDevice, CreateFailsWithAStatusInsteadOfCrashing) {
  const absl::StatusOr<SideStatisticsCuda> stats = SideStatisticsCuda::Create(16, 0.9);
  if (!HaveDevice()) {
    EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition) << stats.status();
    EXPECT_THAT(stats.status().message(), HasSubstr("no CUDA device"));
  } else {
    EXPECT_TRUE(stats.ok()) << stats.status();
  }
  // Bad arguments are refused before the device is looked at.
  EXPECT_EQ(SideStatisticsCuda::Create(0, 0.9).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SideStatisticsCuda::Create(16, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RefreshCuda, RefusesBadShapesRanksAndPointers) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  Handles handles;
  const RefreshHandles h = handles.get();
  SideStatisticsCuda stats = SideStatisticsCuda::Create(16, 0.9).value();
  DeviceFloats grad(16 * 8);
  const float* g = grad.get();
  EXPECT_EQ(stats.Update(h, StatisticsSide::kInput, {g}, 8, 12).code(),
            absl::StatusCode::kInvalidArgument);  // d_in != n
  EXPECT_EQ(stats.Update(h, StatisticsSide::kOutput, {g}, 8, 16).code(),
            absl::StatusCode::kInvalidArgument);  // d_out != n
  EXPECT_EQ(stats.Update(h, StatisticsSide::kInput, {}, 8, 16).code(),
            absl::StatusCode::kInvalidArgument);
  const float* null = nullptr;
  EXPECT_EQ(stats.Update(h, StatisticsSide::kInput, {null}, 8, 16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stats.Update({h.stream, nullptr, h.cusolver}, StatisticsSide::kInput, {g}, 8, 16)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stats.num_updates(), 0);
  // No update yet: no basis.
  EXPECT_EQ(SideBasisFromStatisticsCuda(h, stats, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);

  for (const int64_t rank : {int64_t{0}, int64_t{17}}) {
    EXPECT_EQ(TopEigenpairsCuda(h, stats.device_value(), 16, rank).status().code(),
              absl::StatusCode::kInvalidArgument)
        << rank;
  }
  EXPECT_EQ(TopEigenpairsCuda(h, nullptr, 16, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopEigenpairsCuda(h, stats.device_value(), 16, 4, {.oversample = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  TensorBasisHeader header{.tensor_id = 1, .version = 1, .d_out = 8, .d_in = 16};
  EXPECT_EQ(TensorBasisFromStatisticsCuda(h, header, nullptr, &stats, 4).status().code(),
            absl::StatusCode::kInvalidArgument);  // kBoth needs both sides
  header.config.sides = Sides::kOutput;
  EXPECT_EQ(TensorBasisFromStatisticsCuda(h, header, &stats, nullptr, 4).status().code(),
            absl::StatusCode::kInvalidArgument);  // 16 != d_out
}

TEST(RefreshCuda, NonFiniteGradientIsReportedAndResetRecovers) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  Handles handles;
  const RefreshHandles h = handles.get();
  const int64_t d_out = 24, d_in = 40;
  SideStatisticsCuda stats = SideStatisticsCuda::Create(d_in, 0.9).value();
  std::vector<float> bad = AnisotropicMatrix(d_out, d_in, 3);
  bad[5 * d_in + 7] = std::numeric_limits<float>::quiet_NaN();
  DeviceFloats grad(bad.size());
  grad.Upload(bad);
  ASSERT_TRUE(stats.Update(h, StatisticsSide::kInput, {grad.get()}, d_out, d_in).ok());
  const absl::StatusOr<SideBasis> poisoned = SideBasisFromStatisticsCuda(h, stats, 4);
  EXPECT_EQ(poisoned.status().code(), absl::StatusCode::kInvalidArgument) << poisoned.status();
  EXPECT_THAT(poisoned.status().message(), HasSubstr("non-finite"));

  stats.Reset();
  const std::vector<float> good = AnisotropicMatrix(d_out, d_in, 4);
  grad.Upload(good);
  ASSERT_TRUE(stats.Update(h, StatisticsSide::kInput, {grad.get()}, d_out, d_in).ok());
  EXPECT_TRUE(SideBasisFromStatisticsCuda(h, stats, 4).ok());
}

// ---- against the CPU ----------------------------------------------------------------

struct Shape {
  int64_t d_out, d_in, rank;
};

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  return absl::StrCat(info.param.d_out, "x", info.param.d_in, "_r", info.param.rank);
}

class RefreshCudaShapeTest : public ::testing::TestWithParam<Shape> {};

// Step by step over several gradients (two workers' at every step after the
// first), both sides: the device EMA against SecondMomentEma after each
// step, then eigenpairs, side bases and the TensorBasis against the CPU.
TEST_P(RefreshCudaShapeTest, MatchesTheCpuPathStepByStep) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const auto [d_out, d_in, rank] = GetParam();
  const double decay = 0.9;
  Handles handles;
  const RefreshHandles h = handles.get();
  SideStatisticsCuda in_gpu = SideStatisticsCuda::Create(d_in, decay).value();
  SideStatisticsCuda out_gpu = SideStatisticsCuda::Create(d_out, decay).value();
  SecondMomentEma in_cpu = SecondMomentEma::Create(d_in, decay).value();
  SecondMomentEma out_cpu = SecondMomentEma::Create(d_out, decay).value();
  DeviceFloats dev0(d_out * d_in), dev1(d_out * d_in);
  for (uint32_t step = 0; step < 4; ++step) {
    const int64_t workers = step == 0 ? 1 : 2;
    const std::vector<std::vector<float>> grads =
        SharedPlusNoiseGradients(d_out, d_in, workers, /*directions=*/12, /*noise=*/0.3, step);
    std::vector<const float*> host, dev;
    for (int64_t w = 0; w < workers; ++w) {
      (w == 0 ? dev0 : dev1).Upload(grads[w]);
      host.push_back(grads[w].data());
      dev.push_back((w == 0 ? dev0 : dev1).get());
    }
    ASSERT_TRUE(in_cpu.UpdateInputSide(host, d_out, d_in).ok());
    ASSERT_TRUE(out_cpu.UpdateOutputSide(host, d_out, d_in).ok());
    ASSERT_TRUE(in_gpu.Update(h, StatisticsSide::kInput, dev, d_out, d_in).ok());
    ASSERT_TRUE(out_gpu.Update(h, StatisticsSide::kOutput, dev, d_out, d_in).ok());
    EXPECT_LE(RelativeFrobenius(in_gpu.Download(h).value(), in_cpu.value()), kStatisticsTolerance)
        << "input side, step " << step;
    EXPECT_LE(RelativeFrobenius(out_gpu.Download(h).value(), out_cpu.value()),
              kStatisticsTolerance)
        << "output side, step " << step;
  }
  EXPECT_EQ(in_gpu.num_updates(), 4);

  // Eigenpairs of each side: the shared directions (12 of them, s_k =
  // (k + 1)^-1.5) stand well above the noise, so the top 4 have clear gaps.
  for (const auto& [gpu, cpu] : {std::pair{&in_gpu, &in_cpu}, std::pair{&out_gpu, &out_cpu}}) {
    const int64_t r = std::min<int64_t>(4, gpu->dim());
    const LowRankEigenpairs want = transform::TopEigenpairs(cpu->value(), r).value();
    const LowRankEigenpairs got = TopEigenpairsCuda(h, gpu->device_value(), gpu->dim(), r).value();
    ExpectEigenpairsMatch(got, want, /*check_subspace=*/true);
  }

  // The TensorBasis at the full rank of the case, both residual models.
  for (const ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
    const SideBasisOptions options{.residual = residual};
    TensorBasisHeader header{.tensor_id = 9, .version = 2, .d_out = d_out, .d_in = d_in};
    header.config.power = 0.25;
    const TensorBasis gpu =
        TensorBasisFromStatisticsCuda(h, header, &out_gpu, &in_gpu, rank, options).value();
    const TensorBasis cpu =
        TensorBasis::Create(
            header,
            SideBasis::FromFactor(out_cpu.value(), std::min(rank, d_out), options).value(),
            SideBasis::FromFactor(in_cpu.value(), std::min(rank, d_in), options).value())
            .value();
    ASSERT_EQ(gpu.input_side()->rank(), std::min(rank, d_in));
    const std::vector<float> g = AnisotropicMatrix(d_out, d_in, 77);
    const std::vector<float> t_gpu = Apply(gpu, g, /*inverse=*/false);
    const std::vector<float> t_cpu = Apply(cpu, g, /*inverse=*/false);
    EXPECT_LE(RelativeL2(t_gpu, t_cpu), kActionTolerance) << transform::testing::Name(residual);
    EXPECT_LE(RelativeL2(Apply(gpu, t_gpu, /*inverse=*/true), g), kRoundTripTolerance)
        << transform::testing::Name(residual);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RefreshCudaShapeTest,
                         ::testing::Values(Shape{64, 512, 32},   // skinny, randomized path
                                           Shape{384, 96, 16},   // wide
                                           Shape{256, 256, 64},  // square
                                           Shape{40, 48, 40}),   // k >= n: the dense path
                         ShapeName);

// A given matrix with a clear gap at the rank, through both algorithms
// (randomized and, for rank + oversample >= n, dense), and the options.
TEST(RefreshCuda, EigenpairsOfAGivenMatrixMatchTheCpu) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  Handles handles;
  const RefreshHandles h = handles.get();
  struct Case {
    int64_t n, rank;
    LowRankEigenOptions options;
  };
  for (const Case& c : {Case{300, 20, {}}, Case{300, 20, {.oversample = 20, .power_iterations = 1,
                                                          .seed = 42}},
                        Case{64, 60, {}}, Case{32, 32, {.power_iterations = 0}}}) {
    Eigen::VectorXd spectrum(c.n);
    for (int64_t i = 0; i < c.n; ++i) {
      spectrum(i) = i < c.rank ? 10.0 * std::pow(1.0 + i, -0.5) : 0.1 * std::pow(1.0 + i, -1.0);
    }
    const Eigen::MatrixXd a = FactorWithSpectrum(spectrum, 5);
    DeviceFloats dev(a.size());
    dev.Upload(ToDeviceLayout(a));
    Eigen::VectorXd diag;
    const LowRankEigenpairs got =
        TopEigenpairsCuda(h, dev.get(), c.n, c.rank, c.options, &diag).value();
    const LowRankEigenpairs want = transform::TopEigenpairs(a, c.rank, c.options).value();
    SCOPED_TRACE(absl::StrCat("n ", c.n, " rank ", c.rank));
    ExpectEigenpairsMatch(got, want, /*check_subspace=*/true);
    EXPECT_LE((diag - a.diagonal()).cwiseAbs().maxCoeff(), 1e-6 * a.diagonal().maxCoeff());
  }
}

}  // namespace
}  // namespace gift::kernels
