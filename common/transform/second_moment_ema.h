// An exponential moving average of a square symmetric second-moment matrix,
// the statistics a side basis is built from.
//
//   auto ema = SecondMomentEma::Create(d_in, /*decay=*/0.95);
//   GIFT_RETURN_IF_ERROR(ema->UpdateInputSide({grad}, d_out, d_in));  // G^T G / d_out
//   auto basis = SideBasis::FromFactor(ema->value(), rank, options);
//
// M <- decay * M + (1 - decay) * X on every update after the first; the first
// update sets M = X, so there is no bias from a zero start.
//
// Storage and arithmetic are double: each update adds a (1 - decay)-weighted
// term to a sum of squares whose eigenvalues span many decades, and the basis
// adds a damping of only 1e-3 of the mean eigenvalue; FP32 would lose the small
// eigenvalues to rounding. Gradients arrive as row-major FP32 and are widened
// in blocks of rows or columns (a scratch kept across updates), never copied
// whole; each block's Gram is added straight into the average by a
// symmetric rank-k update (OpenBLAS dsyrk: half the flops of a product).
//
// Thread safety: thread-compatible (const methods may run concurrently;
// updates need exclusion).
#ifndef GIFT_COMMON_TRANSFORM_SECOND_MOMENT_EMA_H_
#define GIFT_COMMON_TRANSFORM_SECOND_MOMENT_EMA_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gift::transform {

class SecondMomentEma {
 public:
  static constexpr double kDefaultDecay = 0.95;

  // Fails (InvalidArgument) unless n >= 1 and 0 <= decay < 1.
  static absl::StatusOr<SecondMomentEma> Create(int64_t n, double decay = kDefaultDecay);

  // Input side: X = mean over `grads` of G_i^T G_i / d_out, each G_i a
  // d_out x d_in row-major FP32 matrix (not owned; read during the call only).
  // One gradient gives the statistics of the reduced gradient; the P workers'
  // gradients give the per-worker second moment. Requires n == d_in.
  absl::Status UpdateInputSide(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in);

  // Output side: X = mean over `grads` of G_i G_i^T / d_in. Requires
  // n == d_out.
  absl::Status UpdateOutputSide(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in);

  // X given directly (e.g. activations' X^T X / N). Must be n x n, finite and
  // symmetric to within 1e-12 of its largest magnitude; it is symmetrized.
  absl::Status UpdateFromMatrix(const Eigen::Ref<const Eigen::MatrixXd>& x);

  int64_t dim() const { return n_; }
  double decay() const { return decay_; }
  // Number of updates so far; value() is all zeros while it is 0.
  int64_t num_updates() const { return num_updates_; }
  // The current average, n x n, symmetric.
  const Eigen::MatrixXd& value() const { return value_; }

 private:
  SecondMomentEma(int64_t n, double decay)
      : n_(n), decay_(decay), value_(Eigen::MatrixXd::Zero(n, n)) {}

  // Folds a finite symmetric sample into the average.
  void Fold(const Eigen::MatrixXd& sample);
  // Adds weight * (the Gram of the widened block, b samples) into the
  // average's triangle (see the .cc); `first`: the update's first block.
  void AccumulateGram(bool rows_are_samples, int64_t b, double weight, bool first);
  // Mirrors the triangle and counts the update.
  void FinishUpdate();

  int64_t n_;
  double decay_;
  int64_t num_updates_ = 0;
  Eigen::MatrixXd value_;
  std::vector<double> widened_;  // scratch: one block of the gradient
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_SECOND_MOMENT_EMA_H_
