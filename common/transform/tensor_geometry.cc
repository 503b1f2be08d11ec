#include "common/transform/tensor_geometry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/finite.h"

namespace gift::transform {
namespace {

bool ValidSource(GeometrySource source) {
  return source == GeometrySource::kGradients || source == GeometrySource::kPerWorkerGradients ||
         source == GeometrySource::kActivations || source == GeometrySource::kActivationsPerWorker;
}

bool ValidSides(Sides sides) {
  return sides == Sides::kInput || sides == Sides::kOutput || sides == Sides::kBoth;
}

}  // namespace

absl::StatusOr<TensorGeometry> TensorGeometry::Create(int64_t d_out, int64_t d_in,
                                                      const TensorGeometryOptions& options) {
  if (d_out < 2 || d_in < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor of shape ", d_out, "x", d_in, " has no geometry to use (both sides must be >= 2)"));
  }
  if (!ValidSides(options.sides)) return absl::InvalidArgumentError("invalid sides");
  if (!ValidSource(options.source)) return absl::InvalidArgumentError("invalid geometry source");
  if (!(options.ema_decay >= 0.0 && options.ema_decay < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("EMA decay ", options.ema_decay, " is not in [0, 1)"));
  }
  if (options.statistics != StatisticsForm::kSketch &&
      options.statistics != StatisticsForm::kExact) {
    return absl::InvalidArgumentError("invalid statistics form");
  }
  const bool per_worker = UsesPerWorkerMoments(options.source);
  const bool sketched = per_worker || options.statistics == StatisticsForm::kSketch;
  if (sketched && options.sketch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch size ", options.sketch_size, " is not >= 1"));
  }
  TensorGeometry geo(d_out, d_in, options);
  auto make_sketch = [&](int64_t n, uint64_t salt) -> absl::StatusOr<SketchedMomentEma> {
    auto sketch =
        MomentSketch::Create(n, std::min(options.sketch_size, n), options.sketch_seed * 2 + salt);
    if (!sketch.ok()) return sketch.status();
    return SketchedMomentEma::Create(std::make_shared<const MomentSketch>(*std::move(sketch)),
                                     options.ema_decay,
                                     per_worker ? options.per_worker_noise : 0.0);
  };
  if (geo.has_output()) {
    if (sketched) {
      auto s = make_sketch(d_out, 0);
      if (!s.ok()) return s.status();
      geo.out_sketch_.emplace(*std::move(s));
    } else {
      geo.out_ema_.emplace(*SecondMomentEma::Create(d_out, options.ema_decay));
    }
  }
  if (geo.has_input()) {
    if (sketched && !UsesActivationFactor(options.source)) {
      auto s = make_sketch(d_in, 1);
      if (!s.ok()) return s.status();
      geo.in_sketch_.emplace(*std::move(s));
    } else {
      geo.in_ema_.emplace(*SecondMomentEma::Create(d_in, options.ema_decay));
    }
  }
  return geo;
}

absl::Status TensorGeometry::AddReducedGradient(const float* avg) {
  if (UsesPerWorkerMoments(options_.source)) return absl::OkStatus();
  const float* grads[] = {avg};
  if (out_ema_.has_value()) {
    if (auto s = out_ema_->UpdateOutputSide(grads, d_out_, d_in_); !s.ok()) return s;
  } else if (out_sketch_.has_value()) {
    if (auto s = AddSketchOf(avg, /*input_side=*/false); !s.ok()) return s;
  }
  if (options_.source != GeometrySource::kGradients) return absl::OkStatus();
  if (in_ema_.has_value()) return in_ema_->UpdateInputSide(grads, d_out_, d_in_);
  if (in_sketch_.has_value()) return AddSketchOf(avg, /*input_side=*/true);
  return absl::OkStatus();
}

absl::Status TensorGeometry::AddSketchOf(const float* avg, bool input_side) {
  SketchedMomentEma& ema = input_side ? *in_sketch_ : *out_sketch_;
  const MomentSketch& sketch = ema.sketch();
  contribution_.resize(static_cast<size_t>(sketch.contribution_size()));
  const absl::Status s =
      input_side ? sketch.InputSideContribution(avg, d_out_, d_in_, contribution_.data())
                 : sketch.OutputSideContribution(avg, d_out_, d_in_, contribution_.data());
  if (!s.ok()) return s;
  return ema.Update(contribution_);
}

absl::StatusOr<int64_t> TensorGeometry::PerWorkerContributionSize() const {
  if (!UsesPerWorkerMoments(options_.source)) {
    return absl::FailedPreconditionError("per-worker contributions need a per-worker source");
  }
  int64_t size = 0;
  if (out_sketch_.has_value()) size += out_sketch_->sketch().contribution_size();
  if (in_sketch_.has_value()) size += in_sketch_->sketch().contribution_size();
  return size;
}

absl::Status TensorGeometry::PerWorkerContribution(const float* g, float* out) const {
  if (!UsesPerWorkerMoments(options_.source)) {
    return absl::FailedPreconditionError("per-worker contributions need a per-worker source");
  }
  if (out == nullptr) return absl::InvalidArgumentError("null output buffer");
  if (out_sketch_.has_value()) {
    const MomentSketch& sketch = out_sketch_->sketch();
    if (auto s = sketch.OutputSideContribution(g, d_out_, d_in_, out); !s.ok()) return s;
    out += sketch.contribution_size();
  }
  if (in_sketch_.has_value()) {
    if (auto s = in_sketch_->sketch().InputSideContribution(g, d_out_, d_in_, out); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status TensorGeometry::AddPerWorkerAverage(absl::Span<const float> average) {
  auto size = PerWorkerContributionSize();
  if (!size.ok()) return size.status();
  if (static_cast<int64_t>(average.size()) != *size) {
    return absl::InvalidArgumentError(
        absl::StrCat("per-worker average has ", average.size(), " values, expected ", *size));
  }
  // Validate both parts before folding either, so a bad input changes nothing.
  if (const int64_t i = FirstNonFinite(average.data(), average.size()); i >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("per-worker average value ", i, " is not finite"));
  }
  if (out_sketch_.has_value()) {
    const int64_t n = out_sketch_->sketch().contribution_size();
    if (auto s = out_sketch_->Update(average.subspan(0, n)); !s.ok()) return s;
    average.remove_prefix(n);
  }
  if (in_sketch_.has_value()) return in_sketch_->Update(average);
  return absl::OkStatus();
}

absl::Status TensorGeometry::AddActivationFactor(const Eigen::Ref<const Eigen::MatrixXd>& factor) {
  if (!UsesActivationFactor(options_.source)) {
    return absl::FailedPreconditionError("activation factors need an activation source");
  }
  if (!in_ema_.has_value()) {
    return absl::FailedPreconditionError(
        "activation factors feed the input side, which this tensor's policy does not transform");
  }
  return in_ema_->UpdateFromMatrix(factor);
}

bool TensorGeometry::ready() const {
  auto side_ready = [](const auto& exact, const auto& sketch) {
    if (exact.has_value()) return exact->num_updates() > 0;
    if (sketch.has_value()) return sketch->num_updates() > 0;
    return true;  // side not enabled
  };
  return side_ready(out_ema_, out_sketch_) && side_ready(in_ema_, in_sketch_);
}

absl::StatusOr<SideBasis> TensorGeometry::BuildSide(bool input_side,
                                                    const BuildBasisOptions& options) const {
  const auto& exact = input_side ? in_ema_ : out_ema_;
  const auto& sketch = input_side ? in_sketch_ : out_sketch_;
  const int64_t n = input_side ? d_in_ : d_out_;
  if (exact.has_value()) {
    return SideBasis::FromFactor(exact->value(), std::min(options.rank, n), options.side,
                                 options.eigen);
  }
  auto eig = sketch->TopEigenpairs(std::min(options.rank, sketch->sketch().sketch_size()));
  if (!eig.ok()) return eig.status();
  return SideBasis::FromEigenpairs(*eig, sketch->diagonal(), n, options.side);
}

absl::StatusOr<TensorBasis> TensorGeometry::BuildBasis(const BuildBasisOptions& options) const {
  if (!ready()) {
    return absl::FailedPreconditionError("no statistics yet for every transformed side");
  }
  if (options.rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is not >= 1"));
  }
  std::optional<SideBasis> out_side, in_side;
  if (has_output()) {
    auto side = BuildSide(false, options);
    if (!side.ok()) {
      return absl::Status(side.status().code(),
                          absl::StrCat("output side: ", side.status().message()));
    }
    out_side.emplace(*std::move(side));
  }
  if (has_input()) {
    auto side = BuildSide(true, options);
    if (!side.ok()) {
      return absl::Status(side.status().code(),
                          absl::StrCat("input side: ", side.status().message()));
    }
    in_side.emplace(*std::move(side));
  }
  return TensorBasis::Create({.tensor_id = options.tensor_id,
                              .version = options.version,
                              .d_out = d_out_,
                              .d_in = d_in_,
                              .config = {options_.sides, options.power}},
                             std::move(out_side), std::move(in_side));
}

}  // namespace gift::transform
