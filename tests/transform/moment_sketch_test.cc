#include "common/transform/moment_sketch.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "common/transform/second_moment_ema.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using testing::SharedPlusNoiseGradients;

// The average of the workers' contributions, as the servers would form it.
std::vector<float> AverageContribution(const MomentSketch& sketch,
                                       const std::vector<std::vector<float>>& grads, int64_t d_out,
                                       int64_t d_in, bool input_side) {
  std::vector<double> sum(sketch.contribution_size(), 0.0);
  std::vector<float> c(sketch.contribution_size());
  for (const auto& g : grads) {
    const absl::Status s = input_side
                               ? sketch.InputSideContribution(g.data(), d_out, d_in, c.data())
                               : sketch.OutputSideContribution(g.data(), d_out, d_in, c.data());
    EXPECT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < c.size(); ++i) sum[i] += c[i];
  }
  std::vector<float> avg(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) avg[i] = static_cast<float>(sum[i] / grads.size());
  return avg;
}

// Largest principal angle's sine between the column spaces of a and b
// (orthonormal columns, same count).
double SubspaceSine(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  const Eigen::MatrixXd residual = b - a * (a.transpose() * b);
  return Eigen::JacobiSVD<Eigen::MatrixXd>(residual).singularValues()(0);
}

TEST(MomentSketchTest, HugeElementsThatOverflowFp32ProductsAreSketchedInDouble) {
  // Squares near 1e38 summed over 48 rows overflow an FP32 accumulation; the
  // scaled moment (about 1e38) does not, and must come out finite and right.
  constexpr int64_t kOut = 48, kIn = 16, kK = 4;
  auto grads = SharedPlusNoiseGradients(kOut, kIn, 2, 1, 0.3, 7);
  double max_abs = 0.0;
  for (float v : grads[0]) max_abs = std::max(max_abs, static_cast<double>(std::abs(v)));
  for (float& v : grads[0]) v = static_cast<float>(v / max_abs * 1.5e19);
  for (bool input_side : {true, false}) {
    const int64_t n = input_side ? kIn : kOut;
    auto sketch = MomentSketch::Create(n, kK, 3);
    ASSERT_TRUE(sketch.ok()) << sketch.status();
    std::vector<float> out(sketch->contribution_size());
    ASSERT_TRUE((input_side
                     ? sketch->InputSideContribution(grads[0].data(), kOut, kIn, out.data())
                     : sketch->OutputSideContribution(grads[0].data(), kOut, kIn, out.data()))
                    .ok());
    auto exact = SecondMomentEma::Create(n);
    const std::vector<const float*> ptrs = {grads[0].data()};
    ASSERT_TRUE((input_side ? exact->UpdateInputSide(ptrs, kOut, kIn)
                            : exact->UpdateOutputSide(ptrs, kOut, kIn))
                    .ok());
    const Eigen::MatrixXd want_y = exact->value() * sketch->omega();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < kK; ++j) {
        ASSERT_TRUE(std::isfinite(out[i * kK + j])) << i << "," << j;
        EXPECT_NEAR(out[i * kK + j] / want_y.norm(), want_y(i, j) / want_y.norm(), 1e-6);
      }
    }
  }
}

TEST(MomentSketchTest, ContributionIsTheSketchOfTheExactMoment) {
  constexpr int64_t kOut = 48, kIn = 80, kK = 12;
  const auto grads = SharedPlusNoiseGradients(kOut, kIn, 3, 4, 0.3, 0);
  for (bool input_side : {true, false}) {
    const int64_t n = input_side ? kIn : kOut;
    auto sketch = MomentSketch::Create(n, kK, 42);
    ASSERT_TRUE(sketch.ok()) << sketch.status();
    auto exact = SecondMomentEma::Create(n);
    std::vector<const float*> ptrs;
    for (const auto& g : grads) ptrs.push_back(g.data());
    ASSERT_TRUE((input_side ? exact->UpdateInputSide(ptrs, kOut, kIn)
                            : exact->UpdateOutputSide(ptrs, kOut, kIn))
                    .ok());
    const std::vector<float> avg = AverageContribution(*sketch, grads, kOut, kIn, input_side);
    const Eigen::MatrixXd want_y = exact->value() * sketch->omega();
    double max_rel = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < kK; ++j) {
        max_rel = std::max(max_rel, std::abs(avg[i * kK + j] - want_y(i, j)) / want_y.norm());
      }
      EXPECT_NEAR(avg[n * kK + i], exact->value()(i, i), 1e-6 * exact->value().trace());
    }
    EXPECT_LT(max_rel, 1e-6) << "input side " << input_side;
    EXPECT_NEAR(avg[n * kK + n], exact->value().trace(), 1e-6 * exact->value().trace());
    // The moment given whole has the same contribution (linearity).
    std::vector<float> whole(sketch->contribution_size());
    ASSERT_TRUE(sketch->MatrixContribution(exact->value(), whole.data()).ok());
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_NEAR(whole[i], avg[i], 1e-6 * exact->value().trace()) << i;
    }
  }
}

TEST(MomentSketchTest, NystromIsExactForLowRankMoments) {
  // Three workers with rank-2 gradients: M has rank <= 6 <= k.
  constexpr int64_t kOut = 40, kIn = 64, kK = 10;
  std::vector<std::vector<float>> grads;
  for (uint32_t w = 0; w < 3; ++w) {
    const Eigen::MatrixXd g =
        testing::Gaussian(kOut, 2, 10 + w) * testing::Gaussian(2, kIn, 20 + w);
    std::vector<float> x(kOut * kIn);
    for (int64_t i = 0; i < kOut; ++i) {
      for (int64_t j = 0; j < kIn; ++j) x[i * kIn + j] = static_cast<float>(g(i, j));
    }
    grads.push_back(std::move(x));
  }
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(kIn, kK, 7));
  auto ema = SketchedMomentEma::Create(sketch, 0.95);
  ASSERT_TRUE(ema.ok());
  ASSERT_TRUE(ema->Update(AverageContribution(*sketch, grads, kOut, kIn, true)).ok());
  auto exact = SecondMomentEma::Create(kIn);
  std::vector<const float*> ptrs;
  for (const auto& g : grads) ptrs.push_back(g.data());
  ASSERT_TRUE(exact->UpdateInputSide(ptrs, kOut, kIn).ok());
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> dense(exact->value());
  auto eig = ema->TopEigenpairs(6);
  ASSERT_TRUE(eig.ok()) << eig.status();
  for (int j = 0; j < 6; ++j) {
    const double want = dense.eigenvalues()(kIn - 1 - j);
    EXPECT_NEAR(eig->values(j), want, 1e-4 * dense.eigenvalues()(kIn - 1)) << j;
  }
  EXPECT_LT(SubspaceSine(dense.eigenvectors().rightCols(6), eig->vectors), 1e-3);
  EXPECT_NEAR(eig->trace, exact->value().trace(), 1e-6 * exact->value().trace());
}

TEST(MomentSketchTest, CapturesTheDominantSubspaceOfNoisyMoments) {
  // Four dominant directions plus noise; k = 2r captures the top r = 4.
  constexpr int64_t kOut = 96, kIn = 128, kK = 16;
  const auto grads = SharedPlusNoiseGradients(kOut, kIn, 8, 4, 0.05, 3);
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(kIn, kK, 9));
  auto ema = SketchedMomentEma::Create(sketch, 0.0);
  ASSERT_TRUE(ema->Update(AverageContribution(*sketch, grads, kOut, kIn, true)).ok());
  auto exact = SecondMomentEma::Create(kIn);
  std::vector<const float*> ptrs;
  for (const auto& g : grads) ptrs.push_back(g.data());
  ASSERT_TRUE(exact->UpdateInputSide(ptrs, kOut, kIn).ok());
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> dense(exact->value());
  auto eig = ema->TopEigenpairs(4);
  ASSERT_TRUE(eig.ok());
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(eig->values(j) / dense.eigenvalues()(kIn - 1 - j), 1.0, 0.02) << j;
  }
  EXPECT_LT(SubspaceSine(dense.eigenvectors().rightCols(4), eig->vectors), 0.05);
}

// Contributions rounded on the way (here a relative error of up to 2^-4 on
// every value, as E4M3 gives) of a moment whose eigenvectors are not the
// coordinates (so each value mixes large and small directions, as in a
// gradient): without the noise the Cholesky of the noisy core takes as
// little shift as it can and the rounding bends even the top eigenvalues;
// told the noise, the shift absorbs it and the eigenvalues well above the
// floor come out right.
TEST(MomentSketchTest, AStatedNoiseKeepsTheEigenvaluesAboveTheRounding) {
  constexpr int64_t kN = 64, kK = 32, kRank = 24;
  const Eigen::MatrixXd q = testing::Gaussian(kN, kN, 3).householderQr().householderQ();
  Eigen::VectorXd lambda(kN);
  for (int64_t i = 0; i < kN; ++i) lambda(i) = std::ldexp(1.0, -static_cast<int>(i));
  const Eigen::MatrixXd m = q * lambda.asDiagonal() * q.transpose();
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(kN, kK, 11));
  std::vector<float> c(sketch->contribution_size());
  ASSERT_TRUE(sketch->MatrixContribution(m, c.data()).ok());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> relative(-0.0625f, 0.0625f);
  for (float& x : c) x *= 1.0f + relative(rng);
  constexpr double kNoise = 0.0625;
  auto quiet = SketchedMomentEma::Create(sketch, 0.0);
  auto told = SketchedMomentEma::Create(sketch, 0.0, kNoise);
  ASSERT_TRUE(quiet.ok() && told.ok());
  ASSERT_TRUE(quiet->Update(c).ok());
  ASSERT_TRUE(told->Update(c).ok());
  auto loud = quiet->TopEigenpairs(kRank), shifted = told->TopEigenpairs(kRank);
  ASSERT_TRUE(loud.ok()) << loud.status();
  ASSERT_TRUE(shifted.ok()) << shifted.status();
  // The floor: noise x ||Y||_F / sqrt(k), ||Y||_F about ||M||_F here.
  const double floor = kNoise * m.norm() / std::sqrt(static_cast<double>(kK));
  double worst_loud = 0, worst_shifted = 0;
  for (int64_t j = 0; j < kRank && lambda(j) > 10 * floor; ++j) {
    worst_loud = std::max(worst_loud, std::abs(loud->values(j) / lambda(j) - 1));
    worst_shifted = std::max(worst_shifted, std::abs(shifted->values(j) / lambda(j) - 1));
  }
  EXPECT_LT(worst_shifted, 0.05);
  EXPECT_GT(worst_loud, 2 * worst_shifted);
  EXPECT_EQ(SketchedMomentEma::Create(sketch, 0.5, -1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SketchedMomentEma::Create(sketch, 0.5, std::nan("")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MomentSketchTest, EmaOfSketchesIsTheSketchOfTheEma) {
  constexpr int64_t kOut = 32, kIn = 48, kK = 8;
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(kIn, kK, 5));
  auto ema = SketchedMomentEma::Create(sketch, 0.9);
  auto exact = SecondMomentEma::Create(kIn, 0.9);
  for (uint32_t step = 0; step < 4; ++step) {
    const auto grads = SharedPlusNoiseGradients(kOut, kIn, 2, 3, 0.5, step);
    ASSERT_TRUE(ema->Update(AverageContribution(*sketch, grads, kOut, kIn, true)).ok());
    std::vector<const float*> ptrs;
    for (const auto& g : grads) ptrs.push_back(g.data());
    ASSERT_TRUE(exact->UpdateInputSide(ptrs, kOut, kIn).ok());
  }
  EXPECT_EQ(ema->num_updates(), 4);
  EXPECT_NEAR(ema->trace(), exact->value().trace(), 1e-6 * exact->value().trace());
  EXPECT_LT((ema->diagonal() - exact->value().diagonal()).norm(),
            1e-6 * exact->value().diagonal().norm());
}

TEST(MomentSketchTest, APrefixOfTheColumnsIsTheSketchOfThoseColumnsAndItsEmaTheirEma) {
  // A k = 24 sketch, and what its first 12 columns give: the same test
  // columns, contributions cut row by row, an EMA cut the same way equal to
  // the EMA of the cut contributions, and eigenpairs from the cut EMA as good
  // as its 12 columns allow (M of rank <= 6 here: exact).
  constexpr int64_t kOut = 40, kIn = 64, kK = 24, kPrefix = 12;
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(kIn, kK, 11));
  auto prefix = sketch->Prefix(kPrefix);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_EQ(prefix->sketch_size(), kPrefix);
  EXPECT_EQ(prefix->omega(), sketch->omega().leftCols(kPrefix));
  auto shared_prefix = std::make_shared<const MomentSketch>(*std::move(prefix));
  // Cuts each row of Y (n x k, row-major) to its first kPrefix values.
  auto cut = [&](const std::vector<float>& c) {
    std::vector<float> out;
    for (int64_t i = 0; i < kIn; ++i) {
      out.insert(out.end(), c.begin() + i * kK, c.begin() + i * kK + kPrefix);
    }
    out.insert(out.end(), c.begin() + kIn * kK, c.end());  // diag, trace
    return out;
  };
  auto full_ema = SketchedMomentEma::Create(sketch, 0.9, /*noise=*/1e-3);
  auto cut_ema = SketchedMomentEma::Create(shared_prefix, 0.9, /*noise=*/1e-3);
  ASSERT_TRUE(full_ema.ok() && cut_ema.ok());
  for (uint32_t step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> grads;
    for (uint32_t w = 0; w < 3; ++w) {
      const Eigen::MatrixXd g = testing::Gaussian(kOut, 2, 10 + w) *
                                testing::Gaussian(2, kIn, 20 + w) * (1.0 + 0.1 * step);
      std::vector<float> x(kOut * kIn);
      for (int64_t i = 0; i < kOut; ++i) {
        for (int64_t j = 0; j < kIn; ++j) x[i * kIn + j] = static_cast<float>(g(i, j));
      }
      grads.push_back(std::move(x));
    }
    const std::vector<float> avg = AverageContribution(*sketch, grads, kOut, kIn, true);
    const std::vector<float> avg_cut = AverageContribution(*shared_prefix, grads, kOut, kIn, true);
    const std::vector<float> cut_avg = cut(avg);
    ASSERT_EQ(avg_cut.size(), cut_avg.size());
    // FP32 products of other shapes: equal within FP32 rounding of the
    // largest value (the entries are sums with cancellation).
    float largest = 0.0f;
    for (float v : cut_avg) largest = std::max(largest, std::abs(v));
    for (size_t i = 0; i < avg_cut.size(); ++i) {
      EXPECT_NEAR(avg_cut[i], cut_avg[i], 1e-5 * largest) << i;
    }
    ASSERT_TRUE(full_ema->Update(avg).ok());
    ASSERT_TRUE(cut_ema->Update(cut_avg).ok());
  }
  auto from_full = full_ema->Prefix(kPrefix);
  ASSERT_TRUE(from_full.ok()) << from_full.status();
  EXPECT_EQ(from_full->num_updates(), 3);
  EXPECT_EQ(from_full->sketch().omega(), cut_ema->sketch().omega());
  EXPECT_EQ(from_full->trace(), cut_ema->trace());
  EXPECT_EQ(from_full->diagonal(), cut_ema->diagonal());
  auto a = from_full->TopEigenpairs(6);
  auto b = cut_ema->TopEigenpairs(6);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->values, b->values);  // the same values in, the same arithmetic
  EXPECT_EQ(a->vectors, b->vectors);
  auto whole = full_ema->TopEigenpairs(6);
  ASSERT_TRUE(whole.ok());
  for (int j = 0; j < 6; ++j) {
    EXPECT_NEAR(a->values(j), whole->values(j), 1e-2 * whole->values(0)) << j;
  }
  EXPECT_LT(SubspaceSine(whole->vectors, a->vectors), 2e-2);

  EXPECT_FALSE(full_ema->Prefix(0).ok());
  EXPECT_FALSE(full_ema->Prefix(kK + 1).ok());
  EXPECT_TRUE(full_ema->Prefix(kK).ok());
}

TEST(MomentSketchTest, RejectsBadArguments) {
  EXPECT_EQ(MomentSketch::Create(0, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MomentSketch::Create(8, 9, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MomentSketch::Create(8, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto sketch = std::make_shared<const MomentSketch>(*MomentSketch::Create(8, 4, 1));
  std::vector<float> g(4 * 8, 1.0f), out(sketch->contribution_size());
  EXPECT_EQ(sketch->OutputSideContribution(g.data(), 4, 8, out.data()).code(),
            absl::StatusCode::kInvalidArgument);  // d_out != 8
  EXPECT_EQ(sketch->MatrixContribution(Eigen::MatrixXd::Identity(4, 4), out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sketch->MatrixContribution(Eigen::MatrixXd::Identity(8, 8), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  g[5] = std::nanf("");
  EXPECT_EQ(sketch->InputSideContribution(g.data(), 4, 8, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SketchedMomentEma::Create(nullptr, 0.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SketchedMomentEma::Create(sketch, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto ema = SketchedMomentEma::Create(sketch, 0.5);
  EXPECT_EQ(ema->TopEigenpairs(2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ema->Update(std::vector<float>(3)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ema->Update(std::vector<float>(sketch->contribution_size(), 0.0f)).ok());
  EXPECT_EQ(ema->TopEigenpairs(2).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ema->TopEigenpairs(5).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
