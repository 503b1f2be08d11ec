// The statistics a basis owner keeps for one 2-D tensor, from the geometry
// source of its policy, and the bases built from them.
//
// Sources (policy.proto GeometrySource):
//   kGradients           EMA of G^T G / d_out and G G^T / d_in of the reduced
//                        (averaged) gradient; the owner has it after every
//                        step, no training-loop change.
//   kPerWorkerGradients  EMA of the workers' average of G_i^T G_i / d_out
//                        and G_i G_i^T / d_in. Every worker computes a fixed
//                        size contribution from its own gradient
//                        (PerWorkerContribution, a MomentSketch per side),
//                        the servers average it like a gradient, and the
//                        owner folds the average in (AddPerWorkerAverage).
//   kActivations         input side from the layer inputs' X^T X / N handed
//                        in by the training loop (AddActivationFactor); the
//                        output side, when enabled, from the reduced gradient.
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
};

struct TensorGeometryOptions {
  Sides sides = Sides::kBoth;
  GeometrySource source = GeometrySource::kGradients;
  double ema_decay = SecondMomentEma::kDefaultDecay;  // in [0, 1)
  // kPerWorkerGradients: columns of each side's sketch, clamped to the side's
  // dimension (where it equals the dimension the sketch is exact). Must be
  // >= the largest rank bases will be built with.
  int64_t sketch_size = 128;
  // Seed of the sketches' test matrices; every worker must use the same one
  // for a tensor (e.g. the tensor id).
  uint64_t sketch_seed = 0;
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
  // returning OK for kPerWorkerGradients.
  absl::Status AddReducedGradient(const float* avg);

  // kPerWorkerGradients only (FailedPrecondition otherwise): the number of
  // floats a worker contributes per collect step (output side's sketch, then
  // input side's, for the enabled sides), and that contribution from the
  // worker's own gradient.
  absl::StatusOr<int64_t> PerWorkerContributionSize() const;
  absl::Status PerWorkerContribution(const float* g, float* out) const;
  // The servers' average of the workers' contributions.
  absl::Status AddPerWorkerAverage(absl::Span<const float> average);

  // kActivations only (FailedPrecondition otherwise): X^T X / N of the
  // layer's inputs, d_in x d_in.
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

  int64_t d_out_;
  int64_t d_in_;
  TensorGeometryOptions options_;
  // Exact EMAs: kGradients (both sides), kActivations (input from the
  // activation factor, output from the reduced gradient).
  std::optional<SecondMomentEma> out_ema_;
  std::optional<SecondMomentEma> in_ema_;
  // Sketched EMAs: kPerWorkerGradients.
  std::optional<SketchedMomentEma> out_sketch_;
  std::optional<SketchedMomentEma> in_sketch_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TENSOR_GEOMETRY_H_
