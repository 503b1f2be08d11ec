// The dense factorizations the statistics and bases need (the thin QR factor,
// the symmetric eigendecomposition, the thin SVD's left factor), computed by
// LAPACK: OpenBLAS's, the library the FP32 transform already runs on
// (blas_runtime.h).
//
// Why not Eigen's decompositions: each unit that used one instantiated it
// (BDCSVD, SelfAdjointEigenSolver, HouseholderQR), which made those units the
// slowest of the build (moment_sketch.cc alone 45 s at -O3); here they are
// calls into a library that is built already. LAPACK also runs them blocked
// and on OpenBLAS's threads.
//
// Results are deterministic for a given OpenBLAS build and thread count
// (OpenBLAS splits a product's rows and columns among threads, never its
// sums); they may differ in the last bits from another BLAS or another CPU
// kernel of OpenBLAS, as a product does.
//
// Thread safety: plain functions, safe from any thread (OpenBLAS serializes
// what it must).
#ifndef GIFT_COMMON_TRANSFORM_DENSE_FACTORIZATIONS_H_
#define GIFT_COMMON_TRANSFORM_DENSE_FACTORIZATIONS_H_

#include <Eigen/Core>

#include "absl/status/statusor.h"

namespace gift::transform {

// y = Q R for an m x k matrix with k <= m: Q (m x k) with orthonormal
// columns and R (k x k) upper triangular, as Householder QR gives them
// (R's diagonal may be negative). InvalidArgument for k > m or an empty y.
struct ThinQr {
  Eigen::MatrixXd q;
  Eigen::MatrixXd r;
};
absl::StatusOr<ThinQr> ThinQrOf(const Eigen::MatrixXd& y);

// The eigenvalues (ascending) and orthonormal eigenvectors (columns, in the
// same order) of a symmetric n x n matrix; only its lower triangle is read.
// InvalidArgument for a matrix that is not square or empty; Internal when
// LAPACK does not converge.
struct SymmetricEigen {
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;
};
absl::StatusOr<SymmetricEigen> SymmetricEigenOf(const Eigen::MatrixXd& a);

// b = U S V^T for an m x k matrix: U (m x min(m, k)) with orthonormal columns
// and the singular values S, descending. Internal when LAPACK does not
// converge; InvalidArgument for an empty b.
struct ThinSvdLeft {
  Eigen::MatrixXd u;
  Eigen::VectorXd singular_values;
};
absl::StatusOr<ThinSvdLeft> ThinSvdLeftOf(const Eigen::MatrixXd& b);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_DENSE_FACTORIZATIONS_H_
