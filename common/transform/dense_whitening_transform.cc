#include "common/transform/dense_whitening_transform.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gift::transform {
namespace {

using RowMajorMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

RowMajorMatrixXd Load(const float* x, int64_t rows, int64_t cols) {
  RowMajorMatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = x[i];
  return m;
}

absl::Status Store(const RowMajorMatrixXd& m, float* out) {
  const int64_t size = m.size();
  for (int64_t i = 0; i < size; ++i) out[i] = static_cast<float>(m.data()[i]);
  return CheckResultFinite(out, size);
}

}  // namespace

absl::StatusOr<DenseWhiteningTransform> DenseWhiteningTransform::Create(
    const Eigen::Ref<const Eigen::MatrixXd>& factor, int64_t rank, int64_t d_out,
    const DenseWhiteningOptions& options, const LowRankEigenOptions& eigen_options) {
  if (d_out < 1) return absl::InvalidArgumentError(absl::StrCat("bad d_out ", d_out));
  if (!(options.floor_eps >= 0.0) || !(options.damping_eps >= 0.0) ||
      !std::isfinite(options.floor_eps) || !std::isfinite(options.damping_eps) ||
      !(options.floor_eps + options.damping_eps > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("bad options: floor_eps ", options.floor_eps,
                                                   ", damping_eps ", options.damping_eps,
                                                   " (both >= 0, finite, not both 0)"));
  }
  // TopEigenpairs checks the shape, finiteness and rank.
  GIFT_ASSIGN_OR_RETURN(LowRankEigenpairs eig, TopEigenpairs(factor, rank, eigen_options));
  const int64_t n = factor.rows();
  if (!(eig.trace > 0.0)) {
    return absl::FailedPreconditionError(absl::StrCat("factor trace ", eig.trace, " is not > 0"));
  }
  const double scale = eig.trace / static_cast<double>(n);
  const double floor = options.floor_eps * scale;
  const double delta = options.damping_eps * scale;
  const Eigen::MatrixXd low_rank = eig.vectors * eig.values.asDiagonal() * eig.vectors.transpose();
  Eigen::MatrixXd a_hat = low_rank;
  for (int64_t i = 0; i < n; ++i) {
    const double residual = factor(i, i) - low_rank(i, i);
    a_hat(i, i) += std::max(residual, floor) + delta;
  }
  a_hat = 0.5 * (a_hat + a_hat.transpose()).eval();
  const Eigen::LLT<Eigen::MatrixXd> llt(a_hat);
  if (llt.info() != Eigen::Success) {
    return absl::FailedPreconditionError("A_hat is not positive definite (Cholesky failed)");
  }
  Eigen::MatrixXd l = llt.matrixL();
  return DenseWhiteningTransform(d_out, rank, std::move(a_hat), std::move(l));
}

absl::Status DenseWhiteningTransform::Forward(const float* in, int64_t d_out, int64_t d_in,
                                              float* out) const {
  GIFT_RETURN_IF_ERROR(CheckArguments(in, d_out, d_in, out));
  // X L^T = G, solved for X on the right with the upper factor L^T.
  RowMajorMatrixXd x = Load(in, d_out, d_in);
  l_.transpose().triangularView<Eigen::Upper>().solveInPlace<Eigen::OnTheRight>(x);
  return Store(x, out);
}

absl::Status DenseWhiteningTransform::Inverse(const float* in, int64_t d_out, int64_t d_in,
                                              float* out) const {
  GIFT_RETURN_IF_ERROR(CheckArguments(in, d_out, d_in, out));
  const RowMajorMatrixXd x = Load(in, d_out, d_in);
  const RowMajorMatrixXd g = x * l_.transpose().triangularView<Eigen::Upper>();
  return Store(g, out);
}

std::string DenseWhiteningTransform::name() const {
  return absl::StrCat("dense_whitening(r=", rank_, ")");
}

}  // namespace gift::transform
