#include "common/transform/side_basis.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/dense_factorizations.h"

namespace gift::transform {
namespace {

using RowMajorMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMajorFloatMap =
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
using MutableRowMajorFloatMap =
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Rows of the FP32 buffer widened to double at a time.
constexpr int64_t kRowBlock = 64;

// Largest deviation of z^T z from the identity accepted when loading.
constexpr double kOrthonormalTolerance = 1e-6;

double Damping(double damping_eps, double trace, int64_t n) {
  return damping_eps * trace / static_cast<double>(n);
}

absl::Status CheckApplyArgs(const float* in, int64_t count, double p, const float* out) {
  if (in == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("bad dimension ", count));
  if (!(p > 0.0) || !std::isfinite(p)) {
    return absl::InvalidArgumentError(absl::StrCat("power ", p, " is not a finite value > 0"));
  }
  return absl::OkStatus();
}

bool IsOrthonormal(const Eigen::MatrixXd& m) {
  const Eigen::MatrixXd gram = m.transpose() * m;
  return (gram - Eigen::MatrixXd::Identity(m.cols(), m.cols())).cwiseAbs().maxCoeff() <=
         kOrthonormalTolerance;
}

}  // namespace

absl::StatusOr<SideBasis> SideBasis::FromFactor(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                                int64_t rank, const SideBasisOptions& options,
                                                const LowRankEigenOptions& eigen_options) {
  GIFT_ASSIGN_OR_RETURN(LowRankEigenpairs eig, TopEigenpairs(a, rank, eigen_options));
  const Eigen::VectorXd diag_a = a.diagonal();
  return FromEigenpairs(eig, diag_a, a.rows(), options);
}

absl::StatusOr<SideBasis> SideBasis::FromEigenpairs(const LowRankEigenpairs& eig,
                                                    const Eigen::VectorXd& diag_a, int64_t n,
                                                    const SideBasisOptions& options) {
  const int64_t r = eig.vectors.cols();
  if (n < 1 || eig.vectors.rows() != n || r < 1 || r > n || eig.values.size() != r) {
    return absl::InvalidArgumentError(absl::StrCat("eigenpairs of shape ", eig.vectors.rows(), "x",
                                                   r, " with ", eig.values.size(),
                                                   " values do not fit dimension ", n));
  }
  if (!(options.damping_eps > 0.0) || !std::isfinite(options.damping_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("damping_eps ", options.damping_eps, " is not a finite value > 0"));
  }
  if (!eig.vectors.allFinite() || !eig.values.allFinite() || !std::isfinite(eig.trace)) {
    return absl::InvalidArgumentError("eigenpairs have non-finite elements");
  }
  if (!(eig.trace > 0.0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("factor trace ", eig.trace, " is not > 0: no geometry to use"));
  }
  Parts parts;
  parts.residual = options.residual;
  parts.damping_eps = options.damping_eps;
  parts.damping = Damping(options.damping_eps, eig.trace, n);
  parts.trace = eig.trace;
  parts.u = eig.vectors;
  parts.lam = eig.values.cwiseMax(0.0);
  const double delta = parts.damping;

  switch (options.residual) {
    case ResidualModel::kIsotropic: {
      const double sigma =
          r == n ? 0.0 : std::max(eig.trace - parts.lam.sum(), 0.0) / static_cast<double>(n - r);
      const double d = sigma + delta;
      parts.d = Eigen::VectorXd::Constant(1, d);
      parts.z = parts.u;
      parts.one_plus_sig = (parts.lam.array() + delta) / d;
      break;
    }
    case ResidualModel::kDiagonal: {
      if (diag_a.size() != n || !diag_a.allFinite()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the diagonal model needs the ", n, " finite diagonal values of A"));
      }
      const Eigen::VectorXd low_rank_diag = parts.u.cwiseAbs2() * parts.lam;
      parts.d = (diag_a - low_rank_diag).cwiseMax(0.0).array() + delta;
      // V = D^{-1/2} U = Q R; R Lam R^T = P Sig P^T; Z = Q P.
      const Eigen::MatrixXd v = parts.d.cwiseSqrt().cwiseInverse().asDiagonal() * parts.u;
      GIFT_ASSIGN_OR_RETURN(const ThinQr qr, ThinQrOf(v));
      Eigen::MatrixXd core = qr.r * parts.lam.asDiagonal() * qr.r.transpose();
      core = 0.5 * (core + core.transpose()).eval();
      GIFT_ASSIGN_OR_RETURN(const SymmetricEigen eigh, SymmetricEigenOf(core));
      // Descending order, Sig clamped >= 0 (the core is PSD).
      parts.z.resize(n, r);
      parts.one_plus_sig.resize(r);
      for (int64_t j = 0; j < r; ++j) {
        parts.one_plus_sig(j) = 1.0 + std::max(eigh.values(r - 1 - j), 0.0);
        parts.z.col(j) = qr.q * eigh.vectors.col(r - 1 - j);
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown residual model ", static_cast<int>(options.residual)));
  }
  return FromParts(std::move(parts));
}

absl::StatusOr<SideBasis> SideBasis::FromParts(Parts parts) {
  const int64_t n = parts.u.rows();
  const int64_t r = parts.u.cols();
  if (n < 1 || r < 1 || r > n) {
    return absl::InvalidArgumentError(absl::StrCat("basis of shape ", n, "x", r));
  }
  if (parts.residual != ResidualModel::kIsotropic && parts.residual != ResidualModel::kDiagonal) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown residual model ", static_cast<int>(parts.residual)));
  }
  const int64_t d_size = parts.residual == ResidualModel::kIsotropic ? 1 : n;
  if (parts.lam.size() != r || parts.z.rows() != n || parts.z.cols() != r ||
      parts.one_plus_sig.size() != r || parts.d.size() != d_size) {
    return absl::InvalidArgumentError("basis parts have inconsistent sizes");
  }
  if (!parts.u.allFinite() || !parts.lam.allFinite() || !parts.d.allFinite() ||
      !parts.z.allFinite() || !parts.one_plus_sig.allFinite() ||
      !std::isfinite(parts.damping_eps) || !std::isfinite(parts.trace)) {
    return absl::InvalidArgumentError("basis parts have non-finite values");
  }
  if (!(parts.damping_eps > 0.0) || !(parts.trace > 0.0) ||
      parts.damping != Damping(parts.damping_eps, parts.trace, n)) {
    return absl::InvalidArgumentError("basis damping is inconsistent with its trace");
  }
  if (parts.lam.minCoeff() < 0.0 || !(parts.d.minCoeff() > 0.0) ||
      !(parts.one_plus_sig.minCoeff() > 0.0)) {
    return absl::InvalidArgumentError("basis eigenvalues or residual out of range");
  }
  if (parts.residual == ResidualModel::kIsotropic && parts.z != parts.u) {
    return absl::InvalidArgumentError("isotropic basis with z != u");
  }
  if (!IsOrthonormal(parts.u) || !IsOrthonormal(parts.z)) {
    return absl::InvalidArgumentError("basis vectors are not orthonormal");
  }
  return SideBasis(std::move(parts));
}

Eigen::MatrixXd SideBasis::DenseModelFactor() const {
  const int64_t n = dim();
  const Eigen::VectorXd d_sqrt = DiagonalPower(0.5);
  Eigen::MatrixXd inner = Eigen::MatrixXd::Identity(n, n);
  inner.noalias() +=
      parts_.z * (parts_.one_plus_sig.array() - 1.0).matrix().asDiagonal() * parts_.z.transpose();
  return d_sqrt.asDiagonal() * inner * d_sqrt.asDiagonal();
}

Eigen::VectorXd SideBasis::DiagonalPower(double q) const {
  if (parts_.d.size() == 1) return Eigen::VectorXd::Constant(dim(), std::pow(parts_.d(0), q));
  return parts_.d.array().pow(q);
}

Eigen::VectorXd SideBasis::CorePower(double q) const {
  return parts_.one_plus_sig.array().pow(q) - 1.0;
}

absl::Status SideBasis::ForwardRight(const float* in, int64_t rows, double p, float* out) const {
  return ApplyRight(in, rows, p, /*inverse=*/false, out);
}
absl::Status SideBasis::InverseRight(const float* in, int64_t rows, double p, float* out) const {
  return ApplyRight(in, rows, p, /*inverse=*/true, out);
}
absl::Status SideBasis::ForwardLeft(const float* in, int64_t cols, double p, float* out) const {
  return ApplyLeft(in, cols, p, /*inverse=*/false, out);
}
absl::Status SideBasis::InverseLeft(const float* in, int64_t cols, double p, float* out) const {
  return ApplyLeft(in, cols, p, /*inverse=*/true, out);
}

// Forward: out = in D^{-p} S(-p); inverse: out = in S(p) D^p, with
// X S(q) = X + ((X Z) diag((1 + Sig)^q - 1)) Z^T.
absl::Status SideBasis::ApplyRight(const float* in, int64_t rows, double p, bool inverse,
                                   float* out) const {
  GIFT_RETURN_IF_ERROR(CheckApplyArgs(in, rows, p, out));
  const int64_t n = dim();
  const Eigen::VectorXd scale = DiagonalPower(inverse ? p : -p);
  const Eigen::VectorXd core = CorePower(inverse ? p : -p);
  const Eigen::MatrixXd& z = parts_.z;
  const RowMajorFloatMap x(in, rows, n);
  MutableRowMajorFloatMap y(out, rows, n);
  RowMajorMatrixXd block;
  Eigen::MatrixXd projected;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t b = std::min(kRowBlock, rows - r0);
    block = x.middleRows(r0, b).cast<double>();
    if (!inverse) block = block * scale.asDiagonal();
    projected.noalias() = block * z;
    projected = projected * core.asDiagonal();
    block.noalias() += projected * z.transpose();
    if (inverse) block = block * scale.asDiagonal();
    y.middleRows(r0, b) = block.cast<float>();
  }
  return absl::OkStatus();
}

// Forward: out = S(-p) D^{-p} in; inverse: out = D^p S(p) in, with
// S(q) X = X + Z (diag((1 + Sig)^q - 1) (Z^T X)). Z^T X needs every row, so
// it is accumulated in a first pass before any row is written.
absl::Status SideBasis::ApplyLeft(const float* in, int64_t cols, double p, bool inverse,
                                  float* out) const {
  GIFT_RETURN_IF_ERROR(CheckApplyArgs(in, cols, p, out));
  const int64_t n = dim();
  const Eigen::VectorXd scale = DiagonalPower(inverse ? p : -p);
  const Eigen::VectorXd core = CorePower(inverse ? p : -p);
  const Eigen::MatrixXd& z = parts_.z;
  const RowMajorFloatMap x(in, n, cols);
  MutableRowMajorFloatMap y(out, n, cols);
  RowMajorMatrixXd block;
  Eigen::MatrixXd projected = Eigen::MatrixXd::Zero(rank(), cols);
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t b = std::min(kRowBlock, n - r0);
    block = x.middleRows(r0, b).cast<double>();
    if (!inverse) block = scale.segment(r0, b).asDiagonal() * block;
    projected.noalias() += z.middleRows(r0, b).transpose() * block;
  }
  projected = core.asDiagonal() * projected;
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    const int64_t b = std::min(kRowBlock, n - r0);
    block = x.middleRows(r0, b).cast<double>();
    if (!inverse) block = scale.segment(r0, b).asDiagonal() * block;
    block.noalias() += z.middleRows(r0, b) * projected;
    if (inverse) block = scale.segment(r0, b).asDiagonal() * block;
    y.middleRows(r0, b) = block.cast<float>();
  }
  return absl::OkStatus();
}

}  // namespace gift::transform
