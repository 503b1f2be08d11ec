// The EMA of second moments: first-update initialization, the decay
// recursion, the input/output/per-worker forms, and argument errors.
#include "common/transform/second_moment_ema.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

constexpr int64_t kEmaOut = 70, kEmaIn = 130;  // not multiples of the 64-row block

double MaxAbsDiff(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return (a - b).cwiseAbs().maxCoeff();
}

TEST(SecondMomentEma, FirstUpdateIsTheSampleAndLaterOnesDecay) {
  const std::vector<float> g0 = testing::AnisotropicMatrix(kEmaOut, kEmaIn, 1);
  const std::vector<float> g1 = testing::AnisotropicMatrix(kEmaOut, kEmaIn, 2);
  const Eigen::MatrixXd m0 = testing::ToMatrix(g0, kEmaOut, kEmaIn);
  const Eigen::MatrixXd m1 = testing::ToMatrix(g1, kEmaOut, kEmaIn);

  auto in = SecondMomentEma::Create(kEmaIn, 0.9);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->num_updates(), 0);
  ASSERT_TRUE(in->UpdateInputSide({g0.data()}, kEmaOut, kEmaIn).ok());
  const Eigen::MatrixXd x0 = m0.transpose() * m0 / kEmaOut;
  EXPECT_LE(MaxAbsDiff(in->value(), x0), 1e-12 * x0.cwiseAbs().maxCoeff());
  ASSERT_TRUE(in->UpdateInputSide({g1.data()}, kEmaOut, kEmaIn).ok());
  const Eigen::MatrixXd x1 = 0.9 * x0 + 0.1 * (m1.transpose() * m1 / kEmaOut);
  EXPECT_LE(MaxAbsDiff(in->value(), x1), 1e-12 * x1.cwiseAbs().maxCoeff());
  EXPECT_EQ(in->num_updates(), 2);

  auto out = SecondMomentEma::Create(kEmaOut);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->decay(), 0.95);
  ASSERT_TRUE(out->UpdateOutputSide({g0.data()}, kEmaOut, kEmaIn).ok());
  const Eigen::MatrixXd y0 = m0 * m0.transpose() / kEmaIn;
  EXPECT_LE(MaxAbsDiff(out->value(), y0), 1e-12 * y0.cwiseAbs().maxCoeff());
}

TEST(SecondMomentEma, PerWorkerUpdateAveragesTheWorkersSecondMoments) {
  const std::vector<float> g0 = testing::AnisotropicMatrix(kEmaOut, kEmaIn, 3);
  const std::vector<float> g1 = testing::AnisotropicMatrix(kEmaOut, kEmaIn, 4);
  const Eigen::MatrixXd m0 = testing::ToMatrix(g0, kEmaOut, kEmaIn);
  const Eigen::MatrixXd m1 = testing::ToMatrix(g1, kEmaOut, kEmaIn);
  auto out = SecondMomentEma::Create(kEmaOut);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->UpdateOutputSide({g0.data(), g1.data()}, kEmaOut, kEmaIn).ok());
  const Eigen::MatrixXd want = (m0 * m0.transpose() + m1 * m1.transpose()) / (2.0 * kEmaIn);
  EXPECT_LE(MaxAbsDiff(out->value(), want), 1e-12 * want.cwiseAbs().maxCoeff());
}

TEST(SecondMomentEma, UpdateFromMatrixSymmetrizesAndDecays) {
  auto ema = SecondMomentEma::Create(5, 0.5);
  ASSERT_TRUE(ema.ok());
  const Eigen::MatrixXd a = Eigen::MatrixXd::Identity(5, 5) * 2.0;
  Eigen::MatrixXd b = Eigen::MatrixXd::Constant(5, 5, 4.0);
  ASSERT_TRUE(ema->UpdateFromMatrix(a).ok());
  ASSERT_TRUE(ema->UpdateFromMatrix(b).ok());
  EXPECT_EQ(ema->value(), 0.5 * a + 0.5 * b);
  b(0, 1) = 5.0;  // not symmetric
  EXPECT_EQ(ema->UpdateFromMatrix(b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ema->num_updates(), 2);
}

TEST(SecondMomentEma, RejectsBadArguments) {
  EXPECT_FALSE(SecondMomentEma::Create(0).ok());
  EXPECT_FALSE(SecondMomentEma::Create(4, 1.0).ok());
  EXPECT_FALSE(SecondMomentEma::Create(4, -0.1).ok());
  EXPECT_FALSE(SecondMomentEma::Create(4, std::nan("")).ok());

  auto ema = SecondMomentEma::Create(kEmaIn);
  ASSERT_TRUE(ema.ok());
  std::vector<float> g = testing::AnisotropicMatrix(kEmaOut, kEmaIn, 5);
  EXPECT_EQ(ema->UpdateOutputSide({g.data()}, kEmaOut, kEmaIn).code(),
            absl::StatusCode::kInvalidArgument);  // d_out != n
  EXPECT_EQ(ema->UpdateInputSide({}, kEmaOut, kEmaIn).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ema->UpdateInputSide({nullptr}, kEmaOut, kEmaIn).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ema->UpdateFromMatrix(Eigen::MatrixXd::Zero(3, 3)).code(),
            absl::StatusCode::kInvalidArgument);
  g[17] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ema->UpdateInputSide({g.data()}, kEmaOut, kEmaIn).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ema->num_updates(), 0);
}

}  // namespace
}  // namespace gift::transform
