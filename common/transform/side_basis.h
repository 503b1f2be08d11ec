// The basis of one side (input or output) of a weight gradient: a low-rank
// eigen approximation of that side's second-moment factor A (n x n) plus a
// residual model, damped, and the power operators built from it.
//
// The model factor, with damping delta = damping_eps * trace(A) / n added
// as delta * I to the whole model (so delta is relative to the factor's
// scale, as quantization is scale-free):
//   isotropic: F = U (Lam + delta) U^T + (sigma + delta) (I - U U^T),
//              sigma = max(trace(A) - sum(lam), 0) / (n - r)  (0 when r = n)
//   diagonal:  F = U Lam U^T + D,
//              D = diag(max(diag(A - U Lam U^T), 0) + delta)
// Both are kept in the form F = D^{1/2} (I + Z Sig Z^T) D^{1/2} (Z: n x r,
// orthonormal; 1 + Sig > 0 diagonal): for the isotropic model D = (sigma +
// delta) I, Z = U, 1 + Sig = (Lam + delta) / (sigma + delta); for the diagonal
// model (docs/design.md section 2.2) V = D^{-1/2} U = Q R (thin QR), R Lam R^T =
// P Sig P^T, Z = Q P, computed once when the basis is built.
//
// With S(q) = (I + Z Sig Z^T)^q = I + Z ((1 + Sig)^q - I) Z^T (exact for any
// real q), the power-p operator of this side is
//   W_p = S(-p) D^{-p},   and its inverse W_p^{-1} = D^p S(p).
// For the isotropic model W_p = F^{-p} exactly (symmetric, any p > 0). For
// the diagonal model W_p is NOT F^{-p} unless D is isotropic: it is the
// power-p member of the whitening family, with W_{1/2} F W_{1/2}^T = I exactly
// (the published whitening), and D^{-p} and (I + Z Sig Z^T)^{-p} are each
// exact powers of their own factors.
//
// Applying W_p costs a scaling plus two skinny GEMMs (O(rows * cols * r));
// no n x n matrix is formed. Arithmetic is double on blocks of 64 rows of
// the FP32 buffer, rounded to FP32 once when written back: the reference
// (TensorBasis's Precision::kFp64Reference); TensorBasis's default FP32
// path applies both sides at once on BLAS (tensor_basis_fp32.h).
//
// Thread safety: immutable after construction; all const methods may run
// concurrently.
#ifndef GIFT_COMMON_TRANSFORM_SIDE_BASIS_H_
#define GIFT_COMMON_TRANSFORM_SIDE_BASIS_H_

#include <Eigen/Dense>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transform/low_rank_eigen.h"

namespace gift::transform {

// Values are part of the serialized form: never renumber.
enum class ResidualModel : uint8_t {
  kIsotropic = 1,
  kDiagonal = 2,
};

struct SideBasisOptions {
  ResidualModel residual = ResidualModel::kIsotropic;
  // delta = damping_eps * trace(A) / n, added as delta * I (see above); > 0.
  double damping_eps = 1e-3;
};

class SideBasis {
 public:
  // Everything a basis holds, as plain values (what serialization writes).
  struct Parts {
    ResidualModel residual = ResidualModel::kIsotropic;
    double damping_eps = 0.0;
    double damping = 0.0;          // delta
    double trace = 0.0;            // trace(A)
    Eigen::MatrixXd u;             // n x r eigenvectors of A, orthonormal
    Eigen::VectorXd lam;           // r eigenvalues of A, descending, >= 0
    Eigen::VectorXd d;             // the damped residual: 1 value (isotropic) or n
    Eigen::MatrixXd z;             // n x r; equals u for the isotropic model
    Eigen::VectorXd one_plus_sig;  // r, > 0
  };

  // Builds the basis of factor `a` (n x n, symmetric PSD) with `rank` top
  // eigenpairs from TopEigenpairs. Fails (InvalidArgument) on a bad shape,
  // rank or option, non-finite input, or (FailedPrecondition) a factor with
  // zero or negative trace.
  static absl::StatusOr<SideBasis> FromFactor(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                              int64_t rank, const SideBasisOptions& options = {},
                                              const LowRankEigenOptions& eigen_options = {});

  // As FromFactor, from eigenpairs already computed; `diag_a` (n values, the
  // diagonal of A) is needed by the diagonal model only and may be empty for
  // the isotropic one.
  static absl::StatusOr<SideBasis> FromEigenpairs(const LowRankEigenpairs& eig,
                                                  const Eigen::VectorXd& diag_a, int64_t n,
                                                  const SideBasisOptions& options = {});

  // Rebuilds a basis from its parts after checking that they are consistent
  // (shapes, finiteness, positivity, z == u for the isotropic model).
  // Fails with InvalidArgument otherwise. Used by the parser.
  static absl::StatusOr<SideBasis> FromParts(Parts parts);

  int64_t dim() const { return parts_.u.rows(); }
  int64_t rank() const { return parts_.u.cols(); }
  const Parts& parts() const { return parts_; }

  // The dense n x n model factor F (for tests and diagnostics; O(n^2 r)).
  Eigen::MatrixXd DenseModelFactor() const;

  // In-place or out-of-place (in == out allowed, otherwise no overlap) on
  // row-major FP32 matrices; p > 0. Preconditions are checked
  // (InvalidArgument); the data is not scanned for NaN/Inf here.
  //   ForwardRight: out = in W_p^T,   in: rows x n
  //   InverseRight: out = in W_p^{-T}
  //   ForwardLeft:  out = W_p in,     in: n x cols
  //   InverseLeft:  out = W_p^{-1} in
  absl::Status ForwardRight(const float* in, int64_t rows, double p, float* out) const;
  absl::Status InverseRight(const float* in, int64_t rows, double p, float* out) const;
  absl::Status ForwardLeft(const float* in, int64_t cols, double p, float* out) const;
  absl::Status InverseLeft(const float* in, int64_t cols, double p, float* out) const;

 private:
  explicit SideBasis(Parts parts) : parts_(std::move(parts)) {}

  // D^q as n values.
  Eigen::VectorXd DiagonalPower(double q) const;
  // (1 + Sig)^q - 1 as r values.
  Eigen::VectorXd CorePower(double q) const;

  absl::Status ApplyRight(const float* in, int64_t rows, double p, bool inverse, float* out) const;
  absl::Status ApplyLeft(const float* in, int64_t cols, double p, bool inverse, float* out) const;

  Parts parts_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_SIDE_BASIS_H_
