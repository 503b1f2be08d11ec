// A low-rank sketch of the per-worker second moment of one side of a weight
// gradient, small enough to be summed across workers like a gradient.
//
// The per-worker statistics of the input side are M = (1/P) sum_i G_i^T G_i
// / d_out (n = d_in); of the output side M = (1/P) sum_i G_i G_i^T / d_in
// (n = d_out). Each worker holds only its own G_i, and the full n x n matrix
// is as large as the gradient itself for square layers. Instead every worker
// sends a fixed-size contribution
//
//   Y_i = M_i Omega   (n x k, Omega a shared, seeded n x k matrix with
//                      orthonormal columns; computed as G_i^T (G_i Omega) /
//                      d_out in O(d_out d_in k), never forming M_i)
//   diag(M_i)         (n values: the squared column norms / d_out)
//   trace(M_i)        (1 value)
//
// laid out as n*k + n + 1 floats, which the servers sum (average) exactly
// like a gradient. Because Y is linear in M, the average of the contributions
// is the contribution of the average, and an EMA of contributions over steps
// (SketchedMomentEma) is the sketch of the EMA of M.
//
// From the (averaged, EMA'd) sketch the top eigenpairs follow by the
// single-pass Nystrom approximation (Tropp, Yurtsever, Udell and Cevher,
// "Fixed-rank approximation of a positive-semidefinite matrix from streaming
// data", 2017): with a small shift nu,
//   C = chol(Omega^T (Y + nu Omega)),  B = (Y + nu Omega) C^{-1},
//   B = U S V^T (thin SVD),            lambda = max(S^2 - nu, 0).
// It is exact when rank(M) <= k, and otherwise captures the top of the
// spectrum the better the faster it decays (take k = 2r or more). Trace and
// diagonal are exact, so the residual models of SideBasis (isotropic sigma
// from the trace, diagonal from diag(M)) need nothing else.
//
//   auto sketch = MomentSketch::Create(d_in, /*sketch_size=*/128, seed);
//   std::vector<float> c(sketch->contribution_size());
//   GIFT_RETURN_IF_ERROR(sketch->InputSideContribution(grad, d_out, d_in, c.data()));
//   ... servers average c over workers into avg ...
//   GIFT_RETURN_IF_ERROR(ema.Update(avg));
//   auto eig = ema.TopEigenpairs(64);
//   auto side = SideBasis::FromEigenpairs(*eig, ema.diagonal(), d_in, options);
//
// Thread safety: MomentSketch is immutable after construction (its const
// methods may run concurrently); SketchedMomentEma is thread-compatible.
#ifndef GIFT_COMMON_TRANSFORM_MOMENT_SKETCH_H_
#define GIFT_COMMON_TRANSFORM_MOMENT_SKETCH_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/transform/low_rank_eigen.h"

namespace gift::transform {

class MomentSketch {
 public:
  // n: the side's dimension; sketch_size k in [1, n]; every worker must use
  // the same seed for a tensor's side (e.g. derived from the tensor id).
  static absl::StatusOr<MomentSketch> Create(int64_t n, int64_t sketch_size, uint64_t seed);

  int64_t dim() const { return omega_.rows(); }
  int64_t sketch_size() const { return omega_.cols(); }
  // n*k + n + 1.
  int64_t contribution_size() const { return ContributionSize(dim(), sketch_size()); }
  // The contribution size of a sketch of dimension n with k columns.
  static int64_t ContributionSize(int64_t n, int64_t k) { return n * k + n + 1; }
  // The n x k test matrix, orthonormal columns.
  const Eigen::MatrixXd& omega() const { return omega_; }

  // The sketch whose test matrix is this one's first `columns` columns
  // (columns in [1, sketch_size], else InvalidArgument): still orthonormal,
  // so a sketch of its own, whose contribution is this one's with every row
  // of Y cut to `columns` values. With SketchedMomentEma::Prefix an owner
  // that holds a k-column EMA sees what any k' <= k columns would have given
  // (issue 48: the per-worker sketch's columns chosen per tensor).
  absl::StatusOr<MomentSketch> Prefix(int64_t columns) const;

  // Writes the contribution of G (d_out x d_in, row-major FP32, finite) to
  // `out` (contribution_size() floats): Y row-major n x k, then diag, then
  // trace. Input side: n == d_in, M_i = G^T G / d_out; output side:
  // n == d_out, M_i = G G^T / d_in. The products Y are two FP32 SGEMMs
  // (OpenBLAS; the contribution is FP32 on the wire anyway, and the double
  // products cost 4x the time on a worker's step thread), the diagonal and
  // trace are summed in double; where the FP32 products overflow (elements
  // near 1e19) the contribution is computed in double instead.
  // InvalidArgument on a shape mismatch, a null pointer or a non-finite
  // element (out untouched then).
  absl::Status InputSideContribution(const float* g, int64_t d_out, int64_t d_in, float* out) const;
  absl::Status OutputSideContribution(const float* g, int64_t d_out, int64_t d_in,
                                      float* out) const;

  // The contribution of a second-moment matrix given whole (n x n,
  // symmetric, finite): M Omega, diag(M), trace(M), in the same layout. By
  // linearity it equals the contribution of any gradients whose moment M is
  // (the benchmarks sketch recorded EMAs with it). InvalidArgument on a shape
  // mismatch, a non-finite element or a null `out`.
  absl::Status MatrixContribution(const Eigen::Ref<const Eigen::MatrixXd>& m, float* out) const;

 private:
  explicit MomentSketch(Eigen::MatrixXd omega);
  // Both in double (the fallback) and in FP32 (the SGEMMs), n x k.
  absl::Status DoubleContribution(const float* g, int64_t d_out, int64_t d_in, bool input_side,
                                  float* out) const;
  Eigen::MatrixXd omega_;
  std::vector<float> omega_f32_;  // row-major
};

// The exponential moving average of averaged sketch contributions, and the
// eigenpairs it implies. The first update sets the average; later ones fold
// in with M <- decay M + (1 - decay) X, as SecondMomentEma does.
class SketchedMomentEma {
 public:
  // Shares ownership of `sketch`. `noise`: the relative rounding error of
  // the contributions' values as they arrive (0 for FP32 computed here;
  // a wire codec's for sketches that travelled, WireNoise in
  // common/policy/statistics_tensor.h). TopEigenpairs' Nystrom shift is then
  // at least noise x ||Y||_F / sqrt(k), about the spectral size of such
  // rounding spread over an n x k sketch: the shift absorbs the rounding,
  // which would otherwise bend even the top eigenvalues (the least shift
  // that keeps the noisy core positive definite is far too small); the
  // eigenvalues below that floor stay of its size. Fails (InvalidArgument)
  // on a null sketch, decay outside [0, 1) or a noise that is negative or
  // not finite.
  static absl::StatusOr<SketchedMomentEma> Create(std::shared_ptr<const MomentSketch> sketch,
                                                  double decay, double noise = 0.0);

  // `contribution`: contribution_size() floats, the average over workers of
  // their contributions for one step. InvalidArgument on a wrong size or a
  // non-finite value.
  absl::Status Update(absl::Span<const float> contribution);

  const MomentSketch& sketch() const { return *sketch_; }
  int64_t num_updates() const { return num_updates_; }
  double trace() const { return trace_; }
  const Eigen::VectorXd& diagonal() const { return diag_; }

  // The top `rank` eigenpairs (rank in [1, sketch_size]) of the sketched
  // average, with its exact trace. FailedPrecondition before the first
  // update or when the sketch is all zero.
  absl::StatusOr<LowRankEigenpairs> TopEigenpairs(int64_t rank) const;

  // This EMA as the EMA of sketch().Prefix(columns) would be after the same
  // updates cut to `columns` columns (the same values: each update is
  // element by element): Y's first `columns` columns, the same diagonal,
  // trace, count, decay and noise. InvalidArgument outside [1,
  // sketch_size].
  absl::StatusOr<SketchedMomentEma> Prefix(int64_t columns) const;

 private:
  SketchedMomentEma(std::shared_ptr<const MomentSketch> sketch, double decay, double noise);

  std::shared_ptr<const MomentSketch> sketch_;
  double decay_;
  double noise_;
  int64_t num_updates_ = 0;
  Eigen::MatrixXd y_;  // n x k
  Eigen::VectorXd diag_;
  double trace_ = 0.0;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_MOMENT_SKETCH_H_
