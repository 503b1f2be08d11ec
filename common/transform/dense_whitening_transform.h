// The published dense form of the input-side whitening (docs/design.md section
// 1.3), kept as a REFERENCE: it costs O(d_out * d_in^2) per call by design
// and is not the product path (TensorBasisTransform is).
//
// From an input-side factor A (n x n, n = d_in, symmetric PSD):
//   A_hat = U_r Lam_r U_r^T + diag(max(diag(A - U_r Lam_r U_r^T), floor))
//           + delta I,
//   floor = floor_eps * trace(A) / n,   delta = damping_eps * trace(A) / n
// (the floor and the damping are relative to the factor's scale, since
// quantization is scale-free; the paper's absolute 1e-3 values correspond
// to a factor of unit mean diagonal), with the top-r eigenpairs from
// TopEigenpairs (low_rank_eigen.h). L = chol(A_hat) (dense, Eigen LLT) and
//   Forward:  X = G L^{-T}   (a triangular solve per call)
//   Inverse:  G = X L^T.
// L^{-1} A_hat L^{-T} = I, i.e. the rows of X are whitened in A_hat's metric.
//
// Relation to TensorBasis: with floor_eps = 0 the model A_hat is exactly the
// diagonal-residual model F of SideBasis (side_basis.h) with the same r and
// damping_eps. SideBasis's p = 1/2 operator W also whitens F, so W = Q L^{-1}
// for an orthogonal Q: the two transforms differ by a rotation of the
// transformed row space (X_basis = X_dense Q^T), not elementwise.
//
// Arithmetic is double; results are rounded to FP32 once when written.
//
// Thread safety: immutable; see gradient_transform.h.
#ifndef GIFT_COMMON_TRANSFORM_DENSE_WHITENING_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_DENSE_WHITENING_TRANSFORM_H_

#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/transform/gradient_transform.h"
#include "common/transform/low_rank_eigen.h"

namespace gift::transform {

struct DenseWhiteningOptions {
  double floor_eps = 1e-3;    // >= 0
  double damping_eps = 1e-3;  // >= 0; floor_eps + damping_eps > 0
};

class DenseWhiteningTransform final : public GradientTransform {
 public:
  // Fails (InvalidArgument) on a non-square or non-finite factor, rank not in
  // [1, n], d_out < 1 or bad options; (FailedPrecondition) when trace(A) <= 0
  // or A_hat is not positive definite in double precision.
  static absl::StatusOr<DenseWhiteningTransform> Create(
      const Eigen::Ref<const Eigen::MatrixXd>& factor, int64_t rank, int64_t d_out,
      const DenseWhiteningOptions& options = {}, const LowRankEigenOptions& eigen_options = {});

  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  int64_t d_out() const override { return d_out_; }
  int64_t d_in() const override { return a_hat_.rows(); }
  // E.g. "dense_whitening(r=32)".
  std::string name() const override;

  // The model A_hat and its lower Cholesky factor L (n x n).
  const Eigen::MatrixXd& a_hat() const { return a_hat_; }
  const Eigen::MatrixXd& cholesky_l() const { return l_; }
  int64_t rank() const { return rank_; }

 private:
  DenseWhiteningTransform(int64_t d_out, int64_t rank, Eigen::MatrixXd a_hat, Eigen::MatrixXd l)
      : d_out_(d_out), rank_(rank), a_hat_(std::move(a_hat)), l_(std::move(l)) {}

  int64_t d_out_;
  int64_t rank_;
  Eigen::MatrixXd a_hat_;
  Eigen::MatrixXd l_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_DENSE_WHITENING_TRANSFORM_H_
