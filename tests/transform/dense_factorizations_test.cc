// The LAPACK factorizations (common/transform/dense_factorizations.h) by their
// defining identities, on random and structured matrices, and their refusals.
#include "common/transform/dense_factorizations.h"

#include <Eigen/Dense>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

double OffIdentity(const Eigen::MatrixXd& q) {
  return (q.transpose() * q - Eigen::MatrixXd::Identity(q.cols(), q.cols())).cwiseAbs().maxCoeff();
}

TEST(DenseFactorizationsTest, ThinQrReproducesItsInput) {
  for (const auto& [m, k] : {std::pair{1, 1}, {7, 3}, {64, 64}, {300, 40}}) {
    const Eigen::MatrixXd y = testing::Gaussian(m, k, 1 + m + k);
    auto qr = ThinQrOf(y);
    ASSERT_TRUE(qr.ok()) << qr.status();
    ASSERT_EQ(qr->q.rows(), m);
    ASSERT_EQ(qr->q.cols(), k);
    ASSERT_EQ(qr->r.rows(), k);
    ASSERT_EQ(qr->r.cols(), k);
    EXPECT_LT(OffIdentity(qr->q), 1e-12) << m << "x" << k;
    EXPECT_LT((qr->q * qr->r - y).cwiseAbs().maxCoeff(), 1e-12 * y.cwiseAbs().maxCoeff() * m);
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < i; ++j) EXPECT_EQ(qr->r(i, j), 0.0);
    }
  }
}

TEST(DenseFactorizationsTest, SymmetricEigenDiagonalizesAscending) {
  for (int n : {1, 2, 17, 128}) {
    const Eigen::MatrixXd g = testing::Gaussian(n, n + 3, 10 + n);
    const Eigen::MatrixXd a = g * g.transpose();
    auto eig = SymmetricEigenOf(a);
    ASSERT_TRUE(eig.ok()) << eig.status();
    ASSERT_EQ(eig->values.size(), n);
    EXPECT_LT(OffIdentity(eig->vectors), 1e-12);
    const Eigen::MatrixXd residual =
        a * eig->vectors - eig->vectors * eig->values.asDiagonal();
    EXPECT_LT(residual.cwiseAbs().maxCoeff(), 1e-11 * a.cwiseAbs().maxCoeff() * n);
    for (int i = 1; i < n; ++i) EXPECT_LE(eig->values(i - 1), eig->values(i));
    EXPECT_NEAR(eig->values.sum(), a.trace(), 1e-10 * a.trace());
  }
  // Only the lower triangle is read.
  Eigen::MatrixXd lower(2, 2);
  lower << 2.0, 99.0, 1.0, 2.0;
  auto eig = SymmetricEigenOf(lower);
  ASSERT_TRUE(eig.ok());
  EXPECT_NEAR(eig->values(0), 1.0, 1e-14);
  EXPECT_NEAR(eig->values(1), 3.0, 1e-14);
}

TEST(DenseFactorizationsTest, ThinSvdLeftFactorAndSingularValues) {
  for (const auto& [m, k] : {std::pair{1, 1}, {50, 8}, {8, 50}, {400, 64}}) {
    const Eigen::MatrixXd b = testing::Gaussian(m, k, 100 + m + k);
    auto svd = ThinSvdLeftOf(b);
    ASSERT_TRUE(svd.ok()) << svd.status();
    const int p = std::min(m, k);
    ASSERT_EQ(svd->u.rows(), m);
    ASSERT_EQ(svd->u.cols(), p);
    ASSERT_EQ(svd->singular_values.size(), p);
    EXPECT_LT(OffIdentity(svd->u), 1e-12);
    for (int i = 1; i < p; ++i) EXPECT_GE(svd->singular_values(i - 1), svd->singular_values(i));
    // B B^T U = U S^2, and the singular values carry all of B's energy.
    const Eigen::VectorXd s2 = svd->singular_values.array().square();
    const Eigen::MatrixXd residual = b * (b.transpose() * svd->u) - svd->u * s2.asDiagonal();
    EXPECT_LT(residual.cwiseAbs().maxCoeff(), 1e-10 * s2(0));
    EXPECT_NEAR(s2.sum(), b.squaredNorm(), 1e-10 * b.squaredNorm());
  }
  // A matrix of known singular values.
  Eigen::MatrixXd d = Eigen::MatrixXd::Zero(4, 3);
  d(0, 1) = -5.0;
  d(2, 0) = 3.0;
  d(3, 2) = 0.5;
  auto svd = ThinSvdLeftOf(d);
  ASSERT_TRUE(svd.ok());
  EXPECT_NEAR(svd->singular_values(0), 5.0, 1e-14);
  EXPECT_NEAR(svd->singular_values(1), 3.0, 1e-14);
  EXPECT_NEAR(svd->singular_values(2), 0.5, 1e-14);
}

TEST(DenseFactorizationsTest, RefusesWhatTheyCannotFactor) {
  EXPECT_TRUE(absl::IsInvalidArgument(ThinQrOf(Eigen::MatrixXd(0, 0)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ThinQrOf(testing::Gaussian(3, 5, 1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SymmetricEigenOf(testing::Gaussian(3, 4, 1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SymmetricEigenOf(Eigen::MatrixXd(0, 0)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ThinSvdLeftOf(Eigen::MatrixXd(0, 3)).status()));
}

}  // namespace
}  // namespace gift::transform
