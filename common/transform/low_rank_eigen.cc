#include "common/transform/low_rank_eigen.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/dense_factorizations.h"
#include "common/transform/gaussian_sketch.h"

namespace gift::transform {
namespace {

// Orthonormal basis of the column space of y (n x k, k <= n).
absl::StatusOr<Eigen::MatrixXd> OrthonormalBasis(const Eigen::MatrixXd& y) {
  GIFT_ASSIGN_OR_RETURN(ThinQr qr, ThinQrOf(y));
  return std::move(qr.q);
}

// The top `rank` pairs of a symmetric matrix b, descending, mapped through q.
absl::StatusOr<LowRankEigenpairs> TopRitzPairs(const Eigen::MatrixXd& b, const Eigen::MatrixXd* q,
                                               int64_t rank) {
  GIFT_ASSIGN_OR_RETURN(const SymmetricEigen eig, SymmetricEigenOf(b));  // ascending
  const int64_t k = b.rows();
  LowRankEigenpairs out;
  out.values.resize(rank);
  Eigen::MatrixXd top(k, rank);
  for (int64_t j = 0; j < rank; ++j) {
    out.values(j) = std::max(eig.values(k - 1 - j), 0.0);
    top.col(j) = eig.vectors.col(k - 1 - j);
  }
  out.vectors = q == nullptr ? top : Eigen::MatrixXd(*q * top);
  return out;
}

}  // namespace

absl::StatusOr<LowRankEigenpairs> TopEigenpairs(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                                int64_t rank, const LowRankEigenOptions& options) {
  const int64_t n = a.rows();
  if (a.cols() != n || n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrix is ", a.rows(), "x", a.cols(), ", not square and non-empty"));
  }
  if (rank < 1 || rank > n) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [1, ", n, "]"));
  }
  if (options.oversample < 0 || options.power_iterations < 0) {
    return absl::InvalidArgumentError("oversample and power_iterations must be >= 0");
  }
  if (!a.allFinite()) return absl::InvalidArgumentError("matrix has non-finite elements");

  const Eigen::MatrixXd sym = 0.5 * (a + a.transpose());
  const int64_t k = rank + options.oversample;
  LowRankEigenpairs out;
  if (k >= n) {
    GIFT_ASSIGN_OR_RETURN(out, TopRitzPairs(sym, nullptr, rank));
  } else {
    Eigen::MatrixXd y = sym * GaussianSketch(n, k, options.seed);
    for (int64_t it = 0; it < options.power_iterations; ++it) {
      GIFT_ASSIGN_OR_RETURN(const Eigen::MatrixXd basis, OrthonormalBasis(y));
      y = sym * basis;
    }
    GIFT_ASSIGN_OR_RETURN(const Eigen::MatrixXd q, OrthonormalBasis(y));
    Eigen::MatrixXd b = q.transpose() * (sym * q);
    b = 0.5 * (b + b.transpose()).eval();
    GIFT_ASSIGN_OR_RETURN(out, TopRitzPairs(b, &q, rank));
  }
  out.trace = sym.trace();
  return out;
}

}  // namespace gift::transform
