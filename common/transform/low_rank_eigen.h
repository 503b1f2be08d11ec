// Top-r eigenpairs of a symmetric positive semi-definite matrix in O(n^2 r)
// by randomized subspace iteration:
//
//   k = r + oversample columns of a Gaussian sketch (seeded, reproducible),
//   Y = A * Omega, then `power_iterations` times Q = qr(Y), Y = A * Q,
//   a final Q = qr(Y), the k x k Rayleigh quotient B = Q^T A Q, its dense
//   eigendecomposition, and the top r Ritz pairs.
//
// When k >= n (including r = n) a dense eigendecomposition of A is used
// instead. Arithmetic is double throughout. The result is a pure function of
// the matrix, the rank and the options (the Gaussian sketch comes from a
// fixed-algorithm generator, not std::normal_distribution).
//
// Thread safety: a reentrant function.
#ifndef GIFT_COMMON_TRANSFORM_LOW_RANK_EIGEN_H_
#define GIFT_COMMON_TRANSFORM_LOW_RANK_EIGEN_H_

#include <Eigen/Dense>
#include <cstdint>

#include "absl/status/statusor.h"

namespace gift::transform {

struct LowRankEigenOptions {
  int64_t oversample = 8;        // extra sketch columns, >= 0
  int64_t power_iterations = 3;  // subspace iterations after the sketch, >= 0
  uint64_t seed = 0x5eed5eed;    // of the Gaussian sketch
};

struct LowRankEigenpairs {
  Eigen::MatrixXd vectors;  // n x r, orthonormal columns
  Eigen::VectorXd values;   // r, descending, clamped to >= 0
  double trace = 0.0;       // trace of the input matrix
};

// Fails (InvalidArgument) when `a` is not square, has non-finite elements, or
// rank is not in [1, n], or the options are negative. Only the lower and
// upper triangles' average is used (A is symmetrized).
absl::StatusOr<LowRankEigenpairs> TopEigenpairs(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                                int64_t rank,
                                                const LowRankEigenOptions& options = {});

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_LOW_RANK_EIGEN_H_
