// The statistics a basis owner keeps for one 2-D tensor, from the geometry
// source of its policy, and the bases built from them.
//
// Sources (policy.proto GeometrySource):
//   kGradients           EMA of G^T G / d_out and G G^T / d_in of the reduced
//                        (averaged) gradient; the owner has it after every
//                        step, no training-loop change. Kept as a sketch by
//                        default (StatisticsForm below).
//   kPerWorkerGradients  EMA of the workers' average of G_i^T G_i / d_out
//                        and G_i G_i^T / d_in. Every worker computes a fixed
//                        size contribution from its own gradient
//                        (PerWorkerContribution, a MomentSketch per side),
//                        the servers average it like a gradient, and the
//                        owner folds the average in (AddPerWorkerAverage).
//   kActivations         input side from the layer inputs' X^T X / N handed
//                        in by the training loop (AddActivationFactor); the
//                        output side, when enabled, from the reduced gradient.
//   kActivationsPerWorker  input side as kActivations, output side as
//                        kPerWorkerGradients (the workers' contributions
//                        hold the output side's sketch only).
//
// Statistics of the reduced gradient (kGradients: both sides; kActivations:
// the output side) take one of two forms (policy.proto StatisticsForm):
//   kSketch  the owner sketches the reduced gradient itself, exactly as a
//            worker sketches its own for kPerWorkerGradients (MomentSketch:
//            two FP32 SGEMMs per side, O(d_out d_in k) with k =
//            sketch_size), and keeps the EMA of the sketches; bases come
//            from its Nystrom eigenpairs (exact when the moment has rank
//            <= k), with exact trace and diagonal. The default.
//   kExact   the n x n EMA in double (SecondMomentEma: O(n^2 m) per side
//            and collect step, 1408^2 x 512 for a 512 x 1408 matrix's
//            input side), bases from its randomized eigen decomposition.
//
//   auto geo = TensorGeometry::Create(d_out, d_in, {.source = GeometrySource::kGradients});
//   GIFT_RETURN_IF_ERROR(geo->AddReducedGradient(avg));        // each collect step
//   auto basis = geo->BuildBasis({.tensor_id = id, .version = v, .power = 0.25});
//
// Thread safety: thread-compatible (const methods may run concurrently;
// updates need exclusion).
#ifndef GIFT_COMMON_TRANSFORM_TENSOR_GEOMETRY_H_
#define GIFT_COMMON_TRANSFORM_TENSOR_GEOMETRY_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/transform/moment_sketch.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"

namespace gift::transform {

// Values match gift.v1.GeometrySource; never renumber.
enum class GeometrySource : uint8_t {
  kGradients = 1,
  kPerWorkerGradients = 2,
  kActivations = 3,
  kActivationsPerWorker = 4,
};

// Whether the input side comes from activation factors (AddActivationFactor).
inline bool UsesActivationFactor(GeometrySource source) {
  return source == GeometrySource::kActivations || source == GeometrySource::kActivationsPerWorker;
}

// Whether the statistics come from per-worker contributions
// (PerWorkerContribution / AddPerWorkerAverage) rather than the reduced
// gradient.
inline bool UsesPerWorkerMoments(GeometrySource source) {
  return source == GeometrySource::kPerWorkerGradients ||
         source == GeometrySource::kActivationsPerWorker;
}

// Values match gift.v1.StatisticsForm; never renumber.
enum class StatisticsForm : uint8_t {
  kSketch = 1,
  kExact = 2,
};

struct TensorGeometryOptions {
  Sides sides = Sides::kBoth;
  GeometrySource source = GeometrySource::kGradients;
  double ema_decay = SecondMomentEma::kDefaultDecay;  // in [0, 1)
  // The form of the reduced gradient's statistics (per-worker moments are
  // always sketched).
  StatisticsForm statistics = StatisticsForm::kSketch;
  // Columns of each sketched side, clamped to the side's dimension (where it
  // equals the dimension the sketch is exact). Bases built with a larger
  // rank are clamped to it: take at least twice the rank (the Nystrom
  // approximation's error is within 1 + r / (k - r - 1) of the best rank-r
  // one in expectation, nuclear norm).
  int64_t sketch_size = 128;
  // Seed of the sketches' test matrices; every worker must use the same one
  // for a tensor (e.g. the tensor id).
  uint64_t sketch_seed = 0;
  // The relative rounding error of the per-worker averages as they arrive
  // (SketchedMomentEma::Create's noise; their wire codec's); unused by the
  // other sources, whose sketches are computed here in FP32.
  double per_worker_noise = 0.0;
};

struct BuildBasisOptions {
  uint64_t tensor_id = 0;
  uint64_t version = 0;
  double power = 0.25;  // p > 0
  int64_t rank = 64;    // >= 1; clamped to each side's dimension (and sketch size)
  SideBasisOptions side;
  LowRankEigenOptions eigen;
};

class TensorGeometry {
 public:
  // InvalidArgument on d_out, d_in < 2 (1-D tensors are sent direct), a bad
  // decay or sketch size.
  static absl::StatusOr<TensorGeometry> Create(int64_t d_out, int64_t d_in,
                                               const TensorGeometryOptions& options);

  const TensorGeometryOptions& options() const { return options_; }
  int64_t d_out() const { return d_out_; }
  int64_t d_in() const { return d_in_; }

  // The reduced gradient (d_out x d_in, row-major FP32) of a collect step.
  // Used by kGradients (both sides) and kActivations (output side); a no-op
  // returning OK for the per-worker sources (UsesPerWorkerMoments).
  absl::Status AddReducedGradient(const float* avg);

  // The per-worker sources only (UsesPerWorkerMoments; FailedPrecondition
  // otherwise): the number of floats a worker contributes per collect step
  // (output side's sketch, then input side's, for the enabled sides that
  // are sketched; 0 for kActivationsPerWorker without an output side), and
  // that contribution from the worker's own gradient.
  absl::StatusOr<int64_t> PerWorkerContributionSize() const;
  absl::Status PerWorkerContribution(const float* g, float* out) const;
  // The servers' average of the workers' contributions.
  absl::Status AddPerWorkerAverage(absl::Span<const float> average);

  // The activation sources only (UsesActivationFactor; FailedPrecondition
  // otherwise): X^T X / N of the layer's inputs, d_in x d_in.
  absl::Status AddActivationFactor(const Eigen::Ref<const Eigen::MatrixXd>& factor);

  // Whether every enabled side has statistics.
  bool ready() const;

  // The basis of the current statistics. FailedPrecondition before ready();
  // errors of the side bases otherwise (e.g. an all-zero factor).
  absl::StatusOr<TensorBasis> BuildBasis(const BuildBasisOptions& options) const;

 private:
  TensorGeometry(int64_t d_out, int64_t d_in, const TensorGeometryOptions& options)
      : d_out_(d_out), d_in_(d_in), options_(options) {}

  bool has_output() const { return options_.sides != Sides::kInput; }
  bool has_input() const { return options_.sides != Sides::kOutput; }
  absl::StatusOr<SideBasis> BuildSide(bool input_side, const BuildBasisOptions& options) const;
  // Folds the sketch of the reduced gradient into one side's sketched EMA.
  absl::Status AddSketchOf(const float* avg, bool input_side);

  int64_t d_out_;
  int64_t d_in_;
  TensorGeometryOptions options_;
  // Each enabled side has exactly one of the two. Exact: the reduced
  // gradient's sides with StatisticsForm::kExact, and the activation
  // sources' input side (from the activation factor). Sketched: the
  // per-worker moments' sides, and the reduced gradient's sides with
  // StatisticsForm::kSketch.
  std::optional<SecondMomentEma> out_ema_;
  std::optional<SecondMomentEma> in_ema_;
  std::optional<SketchedMomentEma> out_sketch_;
  std::optional<SketchedMomentEma> in_sketch_;
  std::vector<float> contribution_;  // scratch of AddSketchOf
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_GEOMETRY_H_
