// Randomized subspace iteration against a dense SelfAdjointEigenSolver on
// synthetic spectra with a gap after r.
#include "common/transform/low_rank_eigen.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

// Tolerances (measured errors are printed; with the default 3 power
// iterations they are near 1e-13 for these spectra):
// eigenvalues relative to the largest one, and 1 - cos(largest principal
// angle) between the computed and the reference subspace.
constexpr double kValueTolerance = 1e-9;
constexpr double kSubspaceTolerance = 1e-9;

// Top `rank` values fall as 1/k from 100; after a gap of `gap` the tail
// falls as 1/k from lam_r / gap.
Eigen::VectorXd GappedSpectrum(int64_t n, int64_t rank, double gap) {
  Eigen::VectorXd s(n);
  for (int64_t k = 0; k < n; ++k) {
    s(k) = k < rank ? 100.0 / (1.0 + k) : 100.0 / rank / gap / (1.0 + k - rank);
  }
  return s;
}

struct Errors {
  double value = 0.0;     // max |lam - lam_ref| / lam_ref_max
  double subspace = 0.0;  // 1 - min singular value of U^T U_ref
};

Errors Compare(const Eigen::MatrixXd& a, const LowRankEigenpairs& got, int64_t rank) {
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ref(a);
  const int64_t n = a.rows();
  Eigen::VectorXd ref_values(rank);
  Eigen::MatrixXd ref_vectors(n, rank);
  for (int64_t j = 0; j < rank; ++j) {
    ref_values(j) = ref.eigenvalues()(n - 1 - j);
    ref_vectors.col(j) = ref.eigenvectors().col(n - 1 - j);
  }
  Errors e;
  e.value = (got.values - ref_values).cwiseAbs().maxCoeff() / ref_values(0);
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(got.vectors.transpose() * ref_vectors);
  e.subspace = 1.0 - svd.singularValues().minCoeff();
  return e;
}

TEST(LowRankEigen, MatchesDenseSolverOnGappedSpectra) {
  const int64_t n = 300;
  for (int64_t rank : {1, 8, 32}) {
    for (double gap : {2.0, 10.0}) {
      const Eigen::MatrixXd a = testing::FactorWithSpectrum(GappedSpectrum(n, rank, gap), 11);
      auto got = TopEigenpairs(a, rank);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->vectors.rows(), n);
      ASSERT_EQ(got->vectors.cols(), rank);
      const Errors e = Compare(a, *got, rank);
      std::cout << "[ eigen    ] n=" << n << " r=" << rank << " gap=" << gap
                << " value_err=" << e.value << " subspace_err=" << e.subspace << "\n";
      EXPECT_LE(e.value, kValueTolerance) << "r=" << rank << " gap=" << gap;
      EXPECT_LE(e.subspace, kSubspaceTolerance) << "r=" << rank << " gap=" << gap;
      // Orthonormal, descending, and the exact trace.
      EXPECT_LE((got->vectors.transpose() * got->vectors - Eigen::MatrixXd::Identity(rank, rank))
                    .cwiseAbs()
                    .maxCoeff(),
                1e-12);
      for (int64_t j = 1; j < rank; ++j) EXPECT_GE(got->values(j - 1), got->values(j));
      EXPECT_NEAR(got->trace, a.trace(), 1e-12 * a.trace());
    }
  }
}

// With rank + oversample >= n the dense solver is used: exact to rounding
// even without a gap.
TEST(LowRankEigen, FullRankAndSmallMatricesUseTheDenseSolver) {
  for (int64_t n : {1, 5, 24}) {
    const Eigen::MatrixXd a = testing::FactorWithSpectrum(GappedSpectrum(n, n, 1.0), 12);
    for (int64_t rank : {std::max<int64_t>(n - 8, 1), n}) {
      auto got = TopEigenpairs(a, rank);
      ASSERT_TRUE(got.ok()) << got.status();
      const Errors e = Compare(a, *got, rank);
      EXPECT_LE(e.value, 1e-12) << "n=" << n << " r=" << rank;
      EXPECT_LE(e.subspace, 1e-10) << "n=" << n << " r=" << rank;
    }
  }
}

TEST(LowRankEigen, SameSeedSameResultAndValuesClampedAtZero) {
  Eigen::VectorXd spectrum = GappedSpectrum(100, 4, 5.0);
  spectrum(99) = -1e-3;  // slightly indefinite, as rounding can make a Gram
  const Eigen::MatrixXd a = testing::FactorWithSpectrum(spectrum, 13);
  auto first = TopEigenpairs(a, 4);
  auto second = TopEigenpairs(a, 4);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->vectors, second->vectors);
  EXPECT_EQ(first->values, second->values);
  auto full = TopEigenpairs(a, 100);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->values(99), 0.0);
}

TEST(LowRankEigen, RejectsBadArguments) {
  const Eigen::MatrixXd a = Eigen::MatrixXd::Identity(6, 6);
  EXPECT_EQ(TopEigenpairs(a, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopEigenpairs(a, 7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopEigenpairs(Eigen::MatrixXd::Zero(6, 5), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopEigenpairs(a, 2, {.oversample = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Eigen::MatrixXd bad = a;
  bad(2, 3) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(TopEigenpairs(bad, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
