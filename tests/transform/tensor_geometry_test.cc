#include "common/transform/tensor_geometry.h"

#include <cmath>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "common/transform/tensor_basis_transform.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using testing::SharedPlusNoiseGradients;

constexpr int64_t kGeometryOut = 64, kGeometryIn = 96;

std::vector<const float*> Pointers(const std::vector<std::vector<float>>& grads) {
  std::vector<const float*> ptrs;
  for (const auto& g : grads) ptrs.push_back(g.data());
  return ptrs;
}

std::vector<float> Average(const std::vector<std::vector<float>>& grads) {
  std::vector<float> avg(grads[0].size());
  for (size_t i = 0; i < avg.size(); ++i) {
    double sum = 0.0;
    for (const auto& g : grads) sum += g[i];
    avg[i] = static_cast<float>(sum / grads.size());
  }
  return avg;
}

BuildBasisOptions Options(uint64_t tensor_id, uint64_t version, double power, int64_t rank) {
  BuildBasisOptions options;
  options.tensor_id = tensor_id;
  options.version = version;
  options.power = power;
  options.rank = rank;
  return options;
}

std::vector<float> Forward(const TensorBasis& basis, const std::vector<float>& g) {
  std::vector<float> out(g.size());
  EXPECT_TRUE(basis.Forward(g.data(), basis.header().d_out, basis.header().d_in, out.data()).ok());
  return out;
}

// The relative error of the e4m3/tensor quantized average of `grads` (step
// 7), sent through `basis` or directly (null), against the exact average.
double QuantizedAverageError(const TensorBasis* basis,
                             const std::vector<std::vector<float>>& grads) {
  const int64_t rows = basis == nullptr ? 0 : basis->header().d_out;
  const int64_t size = static_cast<int64_t>(grads[0].size());
  const std::vector<float> exact = Average(grads);
  const codec::CodecSpec spec = codec::ParseCodecSpec("e4m3/tensor").value();
  std::vector<codec::EncodedTensor> encoded;
  std::vector<codec::EncodedView> views;
  for (size_t w = 0; w < grads.size(); ++w) {
    const std::vector<float> x = basis == nullptr ? grads[w] : Forward(*basis, grads[w]);
    encoded.push_back(codec::EncodedTensor::Create(spec, 1, size).value());
    EXPECT_TRUE(codec::Encode(x.data(), encoded.back().mutable_view(),
                              {.tensor = 1, .step = 7, .rank = static_cast<uint32_t>(w)})
                    .ok());
  }
  for (const auto& e : encoded) views.push_back(e.view());
  std::vector<float> sum(static_cast<size_t>(size));
  EXPECT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f / static_cast<float>(grads.size()),
                                   codec::MutableEncodedView{})
                  .ok());
  if (basis != nullptr) {
    EXPECT_TRUE(basis->Inverse(sum.data(), rows, size / rows, sum.data()).ok());
  }
  return RelativeL2(sum, exact);
}

// Feeds `geo` the activation factor of spectrum 1 / (1 + i), i < kGeometryIn
// (a seeded basis), and returns that spectrum.
Eigen::VectorXd AddHarmonicActivationFactor(TensorGeometry& geo) {
  Eigen::VectorXd spectrum(kGeometryIn);
  for (int64_t i = 0; i < kGeometryIn; ++i) spectrum(i) = std::pow(1.0 + i, -1.0);
  EXPECT_TRUE(geo.AddActivationFactor(testing::FactorWithSpectrum(spectrum, 5)).ok());
  return spectrum;
}

// Steps 0 .. steps-1 of 4 workers' gradients (`directions` shared ones plus
// `noise`), averaged, into `geo` and into the exact EMAs `in` and `out`.
void FeedReducedGradients(TensorGeometry& geo, SecondMomentEma& in, SecondMomentEma& out,
                          uint32_t steps, int directions, double noise) {
  for (uint32_t step = 0; step < steps; ++step) {
    const std::vector<float> avg =
        Average(SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 4, directions, noise, step));
    ASSERT_TRUE(geo.AddReducedGradient(avg.data()).ok());
    const float* p[] = {avg.data()};
    ASSERT_TRUE(in.UpdateInputSide(p, kGeometryOut, kGeometryIn).ok());
    ASSERT_TRUE(out.UpdateOutputSide(p, kGeometryOut, kGeometryIn).ok());
  }
}

TEST(TensorGeometryTest, ExactGradientStatisticsMatchTheReducedGradientsEma) {
  auto geo = TensorGeometry::Create(
      kGeometryOut, kGeometryIn,
      {.source = GeometrySource::kGradients, .statistics = StatisticsForm::kExact});
  ASSERT_TRUE(geo.ok()) << geo.status();
  auto in = SecondMomentEma::Create(kGeometryIn), out = SecondMomentEma::Create(kGeometryOut);
  EXPECT_FALSE(geo->ready());
  EXPECT_EQ(geo->BuildBasis({}).status().code(), absl::StatusCode::kFailedPrecondition);
  FeedReducedGradients(*geo, *in, *out, 3, 4, 0.5);
  ASSERT_TRUE(geo->ready());
  auto basis = geo->BuildBasis(Options(3, 2, 0.25, 8));
  ASSERT_TRUE(basis.ok()) << basis.status();
  EXPECT_EQ(basis->header().tensor_id, 3u);
  EXPECT_EQ(basis->header().version, 2u);
  auto want = TensorBasis::Create(
      {.d_out = kGeometryOut, .d_in = kGeometryIn, .config = {Sides::kBoth, 0.25}},
      *SideBasis::FromFactor(out->value(), 8), *SideBasis::FromFactor(in->value(), 8));
  ASSERT_TRUE(want.ok());
  const auto g = SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 1, 4, 0.5, 9)[0];
  EXPECT_EQ(Forward(*basis, g), Forward(*want, g));  // bit-identical
}

// The nuclear norm of the symmetric matrix m.
double Nuclear(const Eigen::MatrixXd& m) {
  return Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(m).eigenvalues().cwiseAbs().sum();
}

TEST(TensorGeometryTest, SketchedGradientStatisticsAreWithinTheNystromBound) {
  // The default form: the owner sketches the reduced gradient (k = 32 columns
  // of 64 and 96) and keeps the EMA of the sketches. Its rank-r eigen model
  // U Lam U^T of each side must be within the Nystrom bound of the best
  // rank-r approximation of the exact EMA (nuclear norm; the bound holds in
  // expectation, a factor 2 for one draw):
  //   ||M - U Lam U^T||_* <= 2 (1 + r / (k - r - 1)) ||M - [M]_r||_*.
  constexpr int64_t kK = 32, kRank = 6;  // the shared directions: a clear gap below them
  auto geo =
      TensorGeometry::Create(kGeometryOut, kGeometryIn, {.sketch_size = kK, .sketch_seed = 5});
  ASSERT_TRUE(geo.ok()) << geo.status();
  auto in = SecondMomentEma::Create(kGeometryIn), out = SecondMomentEma::Create(kGeometryOut);
  FeedReducedGradients(*geo, *in, *out, 4, 6, 0.3);
  auto basis = geo->BuildBasis(Options(1, 1, 0.25, kRank));
  ASSERT_TRUE(basis.ok()) << basis.status();
  const double bound = 2.0 * (1.0 + static_cast<double>(kRank) / (kK - kRank - 1));
  for (bool input_side : {true, false}) {
    const Eigen::MatrixXd& m = input_side ? in->value() : out->value();
    const SideBasis::Parts& parts =
        (input_side ? basis->input_side() : basis->output_side())->parts();
    ASSERT_EQ(parts.u.cols(), kRank);
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> dense(m);  // ascending
    const Eigen::VectorXd values = dense.eigenvalues();
    const double best_tail = values.head(values.size() - kRank).cwiseAbs().sum();
    const double err = Nuclear(m - parts.u * parts.lam.asDiagonal() * parts.u.transpose());
    EXPECT_LE(err, bound * best_tail) << "input side " << input_side;
    // Exact trace, so the isotropic residual is modelled from the true one.
    EXPECT_NEAR(parts.trace, m.trace(), 1e-5 * m.trace());
  }
  // What the basis is for: the quantized average of a later step through
  // it is as accurate as through the basis of the exact statistics (within
  // 5 %), and better than direct quantization.
  auto exact = TensorGeometry::Create(
      kGeometryOut, kGeometryIn,
      {.source = GeometrySource::kGradients, .statistics = StatisticsForm::kExact});
  ASSERT_TRUE(exact.ok());
  auto exact_in = SecondMomentEma::Create(kGeometryIn),
       exact_out = SecondMomentEma::Create(kGeometryOut);
  FeedReducedGradients(*exact, *exact_in, *exact_out, 4, 6, 0.3);
  auto want = exact->BuildBasis(Options(1, 1, 0.25, kRank));
  ASSERT_TRUE(want.ok());
  const auto grads = SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 8, 6, 0.3, 9);
  const double sketched = QuantizedAverageError(&*basis, grads);
  const double exact_error = QuantizedAverageError(&*want, grads);
  EXPECT_LT(sketched, 1.05 * exact_error) << "exact statistics " << exact_error;
  EXPECT_LT(sketched, 0.75 * QuantizedAverageError(nullptr, grads));
}

TEST(TensorGeometryTest, PerWorkerSketchAtFullSizeMatchesTheExactMoments) {
  // sketch_size >= both dimensions: the sketch holds M Omega for a square
  // orthonormal Omega, so the Nystrom eigenpairs are those of M.
  auto geo =
      TensorGeometry::Create(kGeometryOut, kGeometryIn,
                             {.source = GeometrySource::kPerWorkerGradients, .sketch_size = 128});
  ASSERT_TRUE(geo.ok());
  const auto grads = SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 4, 4, 0.5, 1);
  auto size = geo->PerWorkerContributionSize();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, (kGeometryOut * kGeometryOut + kGeometryOut + 1) +
                       (kGeometryIn * kGeometryIn + kGeometryIn + 1));
  std::vector<double> sum(*size, 0.0);
  std::vector<float> c(*size);
  for (const auto& g : grads) {
    ASSERT_TRUE(geo->PerWorkerContribution(g.data(), c.data()).ok());
    for (int64_t i = 0; i < *size; ++i) sum[i] += c[i];
  }
  std::vector<float> avg(*size);
  for (int64_t i = 0; i < *size; ++i) avg[i] = static_cast<float>(sum[i] / grads.size());
  ASSERT_TRUE(geo->AddPerWorkerAverage(avg).ok());
  ASSERT_TRUE(geo->ready());
  // Rank 4: the four shared directions stand clear of the noise, so both
  // eigen solvers find the same subspace.
  auto basis = geo->BuildBasis(Options(0, 0, 0.25, 4));
  ASSERT_TRUE(basis.ok()) << basis.status();

  auto in = SecondMomentEma::Create(kGeometryIn), out = SecondMomentEma::Create(kGeometryOut);
  ASSERT_TRUE(in->UpdateInputSide(Pointers(grads), kGeometryOut, kGeometryIn).ok());
  ASSERT_TRUE(out->UpdateOutputSide(Pointers(grads), kGeometryOut, kGeometryIn).ok());
  // The reference: the same model built from a dense eigendecomposition.
  auto dense_side = [](const Eigen::MatrixXd& m) {
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> dense(m);  // ascending
    const int64_t n = m.rows();
    LowRankEigenpairs eig;
    eig.vectors = dense.eigenvectors().rightCols(4).rowwise().reverse();
    eig.values = dense.eigenvalues().tail(4).reverse();
    eig.trace = m.trace();
    return SideBasis::FromEigenpairs(eig, m.diagonal(), n).value();
  };
  auto want = TensorBasis::Create(
      {.d_out = kGeometryOut, .d_in = kGeometryIn, .config = {Sides::kBoth, 0.25}},
      dense_side(out->value()), dense_side(in->value()));
  ASSERT_TRUE(want.ok());
  const auto g = SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 1, 4, 0.5, 9)[0];
  // FP32 rounding of the contributions is the only difference.
  EXPECT_LT(RelativeL2(Forward(*basis, g), Forward(*want, g)), 1e-5);
}

TEST(TensorGeometryTest, PerWorkerSketchLowersTheQuantizedAverageError) {
  // Gradients with 24 shared directions of decaying strength plus 10% noise
  // per worker; sketches of 48 columns on sides of 128 and 192; rank 24.
  constexpr int kWorkers = 8, kDirections = 24;
  constexpr int64_t kRows = 128, kCols = 192;
  constexpr double kNoise = 0.1;
  auto geo = TensorGeometry::Create(
      kRows, kCols, {.source = GeometrySource::kPerWorkerGradients, .sketch_size = 48});
  ASSERT_TRUE(geo.ok());
  const int64_t size = *geo->PerWorkerContributionSize();
  for (uint32_t step = 0; step < 3; ++step) {
    const auto grads = SharedPlusNoiseGradients(kRows, kCols, kWorkers, kDirections, kNoise, step);
    std::vector<double> sum(size, 0.0);
    std::vector<float> c(size);
    for (const auto& g : grads) {
      ASSERT_TRUE(geo->PerWorkerContribution(g.data(), c.data()).ok());
      for (int64_t i = 0; i < size; ++i) sum[i] += c[i];
    }
    std::vector<float> avg(size);
    for (int64_t i = 0; i < size; ++i) avg[i] = static_cast<float>(sum[i] / kWorkers);
    ASSERT_TRUE(geo->AddPerWorkerAverage(avg).ok());
  }
  auto basis = geo->BuildBasis(Options(0, 0, 0.25, kDirections));
  ASSERT_TRUE(basis.ok()) << basis.status();
  // A later step (causal: the statistics come from steps 0..2).
  const auto grads = SharedPlusNoiseGradients(kRows, kCols, kWorkers, kDirections, kNoise, 7);
  const std::vector<float> exact = Average(grads);
  const double direct = QuantizedAverageError(nullptr, grads);
  const double gift = QuantizedAverageError(&*basis, grads);
  EXPECT_LT(gift, 0.5 * direct) << "direct " << direct << " gift " << gift;
}

TEST(TensorGeometryTest, ActivationSourceFeedsTheInputSide) {
  auto geo =
      TensorGeometry::Create(kGeometryOut, kGeometryIn, {.source = GeometrySource::kActivations});
  ASSERT_TRUE(geo.ok());
  const std::vector<float> avg =
      Average(SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 2, 4, 0.5, 0));
  ASSERT_TRUE(geo->AddReducedGradient(avg.data()).ok());
  EXPECT_FALSE(geo->ready());  // the input side waits for activations
  const Eigen::VectorXd spectrum = AddHarmonicActivationFactor(*geo);
  ASSERT_TRUE(geo->ready());
  auto basis = geo->BuildBasis(Options(0, 0, 0.5, kGeometryIn));
  ASSERT_TRUE(basis.ok()) << basis.status();
  // Full rank, p = 1/2, isotropic: the input side whitens the factor.
  const Eigen::MatrixXd f = basis->input_side()->DenseModelFactor();
  EXPECT_NEAR(f.trace(), spectrum.sum() * (1.0 + 1e-3), 1e-6 * spectrum.sum());
}

TEST(TensorGeometryTest, ActivationsPerWorkerSourceTakesEachSideFromItsOwnStatistics) {
  // Output side from the workers' sketches (exactly as the per-worker
  // source), input side from the activation factor (as the activation
  // source); the reduced gradient feeds nothing.
  auto geo =
      TensorGeometry::Create(kGeometryOut, kGeometryIn,
                             {.source = GeometrySource::kActivationsPerWorker, .sketch_size = 128});
  auto pw =
      TensorGeometry::Create(kGeometryOut, kGeometryIn,
                             {.source = GeometrySource::kPerWorkerGradients, .sketch_size = 128});
  ASSERT_TRUE(geo.ok() && pw.ok());
  auto size = geo->PerWorkerContributionSize();
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, kGeometryOut * kGeometryOut + kGeometryOut + 1);  // the output side only
  const auto grads = SharedPlusNoiseGradients(kGeometryOut, kGeometryIn, 4, 4, 0.5, 1);
  const std::vector<float> avg = Average(grads);
  ASSERT_TRUE(geo->AddReducedGradient(avg.data()).ok());
  EXPECT_FALSE(geo->ready());
  // The same workers' contributions, averaged, into both geometries.
  const int64_t pw_size = *pw->PerWorkerContributionSize();
  std::vector<double> sum(*size, 0.0), pw_sum(pw_size, 0.0);
  std::vector<float> c(*size), pw_c(pw_size);
  for (const auto& g : grads) {
    ASSERT_TRUE(geo->PerWorkerContribution(g.data(), c.data()).ok());
    ASSERT_TRUE(pw->PerWorkerContribution(g.data(), pw_c.data()).ok());
    for (int64_t i = 0; i < *size; ++i) sum[i] += c[i];
    for (int64_t i = 0; i < pw_size; ++i) pw_sum[i] += pw_c[i];
  }
  std::vector<float> c_avg(*size), pw_avg(pw_size);
  for (int64_t i = 0; i < *size; ++i) c_avg[i] = static_cast<float>(sum[i] / grads.size());
  for (int64_t i = 0; i < pw_size; ++i) pw_avg[i] = static_cast<float>(pw_sum[i] / grads.size());
  ASSERT_TRUE(geo->AddPerWorkerAverage(c_avg).ok());
  ASSERT_TRUE(pw->AddPerWorkerAverage(pw_avg).ok());
  EXPECT_FALSE(geo->ready());  // the input side waits for activations
  const Eigen::VectorXd spectrum = AddHarmonicActivationFactor(*geo);
  ASSERT_TRUE(geo->ready());

  auto basis = geo->BuildBasis(Options(0, 0, 0.5, kGeometryIn));
  auto pw_basis = pw->BuildBasis(Options(0, 0, 0.5, kGeometryIn));
  ASSERT_TRUE(basis.ok()) << basis.status();
  ASSERT_TRUE(pw_basis.ok()) << pw_basis.status();
  EXPECT_NEAR(basis->input_side()->DenseModelFactor().trace(), spectrum.sum() * (1.0 + 1e-3),
              1e-6 * spectrum.sum());
  const Eigen::MatrixXd out = basis->output_side()->DenseModelFactor();
  const Eigen::MatrixXd want = pw_basis->output_side()->DenseModelFactor();
  EXPECT_LT((out - want).norm(), 1e-9 * want.norm());
}

TEST(TensorGeometryTest, RejectsMisuse) {
  EXPECT_EQ(TensorGeometry::Create(1, 64, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorGeometry::Create(8, 8, {.ema_decay = 1.0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorGeometry::Create(
                8, 8, {.source = GeometrySource::kPerWorkerGradients, .sketch_size = 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorGeometry::Create(8, 8, {.sketch_size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);  // the default form sketches
  EXPECT_TRUE(
      TensorGeometry::Create(8, 8, {.statistics = StatisticsForm::kExact, .sketch_size = 0}).ok());
  EXPECT_EQ(
      TensorGeometry::Create(8, 8, {.statistics = static_cast<StatisticsForm>(9)}).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto geo = TensorGeometry::Create(8, 8, {.source = GeometrySource::kGradients});
  ASSERT_TRUE(geo.ok());
  EXPECT_EQ(geo->PerWorkerContributionSize().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(geo->AddActivationFactor(Eigen::MatrixXd::Identity(8, 8)).code(),
            absl::StatusCode::kFailedPrecondition);
  auto pw = TensorGeometry::Create(8, 8, {.source = GeometrySource::kPerWorkerGradients});
  EXPECT_EQ(pw->AddPerWorkerAverage(std::vector<float>(3)).code(),
            absl::StatusCode::kInvalidArgument);
  auto out_only = TensorGeometry::Create(
      8, 8, {.sides = Sides::kOutput, .source = GeometrySource::kActivations});
  EXPECT_EQ(out_only->AddActivationFactor(Eigen::MatrixXd::Identity(8, 8)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gift::transform
