// BasisOwner's part for the fidelity target (docs/design.md section 3.7):
// whether the target chooses a tensor's codecs, the refresh's wire choice,
// and the measure steps' check that falls back to the target codecs.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/statistics_tensor.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/transform_selector.h"
#include "worker/owner/basis_owner.h"

namespace gift::worker {

bool BasisOwner::TargetApplies(const gift::v1::Policy& policy,
                               const policy::TensorSettings& settings) {
  return !policy.selection().target_off() && settings.selection == policy::Selection::kMeasure &&
         !settings.push_codec_overridden;
}

absl::StatusOr<WireChoice> BasisOwner::ChooseWireFor(
    const gift::v1::ClusterState& state, const gift::v1::Policy& policy,
    const OwnedTensorStep& data, const Owned& owned,
    absl::Span<const std::shared_ptr<const transform::TensorBasisTransform>> bases,
    absl::Span<const transform::SelectionCandidate> labels) {
  GIFT_ASSIGN_OR_RETURN(std::vector<transform::CodecPair> pairs,
                        TargetPairs(policy, owned.settings));
  // This worker's seconds per flop, for the candidates' compute.
  if (!bases.empty()) GIFT_RETURN_IF_ERROR(TimeTransform(*bases[0], data));
  const int64_t rows = static_cast<int64_t>(data.rows), cols = static_cast<int64_t>(data.cols);
  std::vector<WireCandidate> candidates;
  for (size_t i = 0; i < bases.size(); ++i) {
    const transform::TensorBasis& b = bases[i]->basis();
    candidates.push_back({.basis = bases[i],
                          .label = labels[i].label,
                          .basis_bytes = transform::SerializeTensorBasis(b).size(),
                          .compute_seconds = TransformBudget::BasisFlops(b, rows, cols) * budget_.seconds_per_flop()});
  }
  const gift::v1::TransformPolicy& tp = owned.settings.transform;
  uint64_t statistics_bytes = 0;
  if (transform::UsesPerWorkerMoments(owned.geometry->options().source)) {
    GIFT_ASSIGN_OR_RETURN(const int64_t floats, owned.geometry->PerWorkerContributionSize());
    // Pushed and pulled in the statistics codec (policy::ResolveTensorSettings
    // of the statistics tensor).
    GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec spec, codec::FromProto(tp.statistics_codec()));
    GIFT_ASSIGN_OR_RETURN(statistics_bytes,
                          policy::StatisticsWireBytes(spec, static_cast<uint64_t>(floats)));
  }
  return ChooseWire(
      pairs, candidates,
      {.own = data.own.data(),
       .rows = data.rows,
       .cols = data.cols,
       .tensor_id = data.tensor_id,
       .step = data.step,
       .statistics_bytes = statistics_bytes,
       .collect_period = std::max<uint32_t>(tp.collect_period(), 1),
       .direct_collect_stride = std::max<uint32_t>(tp.direct_collect_stride(), 1),
       .refresh_period = std::max<uint32_t>(owned.settings.period_steps, 1),
       .compute_budget = budget_.OwnerBudget(
           policy.selection().gift_budget(), TransformBudget::ActiveFlops(state, data.step),
           TransformBudget::OwnedShare(state, session_->member_id())),
       .codec_options = options_.codec_options});
}

absl::StatusOr<bool> BasisOwner::CheckWire(const gift::v1::ClusterState& state,
                                           const gift::v1::TensorBasisState& basis,
                                           const OwnedTensorStep& data, Owned& owned) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  GIFT_ASSIGN_OR_RETURN(std::vector<transform::CodecPair> target,
                        TargetPairs(policy, owned.settings));
  const transform::CodecPair pairs[] = {target[0], owned.wire->codecs};
  std::vector<transform::SelectionCandidate> active;
  if (owned.reference_version != 0) {
    GIFT_ASSIGN_OR_RETURN(auto transform, store_->Get(data.tensor_id, owned.reference_version));
    active.push_back({.label = "active", .transform = transform});
  }
  GIFT_ASSIGN_OR_RETURN(transform::CodecPairErrors errors,
                        MeasureOwnGradient({.own = data.own.data(),
                                            .rows = data.rows,
                                            .cols = data.cols,
                                            .tensor_id = data.tensor_id,
                                            .step = data.step,
                                            .codec_options = options_.codec_options},
                                           active, pairs));
  const double target_error = errors[0][0];
  const double error = errors.back()[1];
  if (owned.report.has_value()) {
    owned.report->set_step(data.step);
    owned.report->set_error(error);
    owned.report->set_target_error(target_error);
    if (target_error > 0) owned.report->set_ratio(error / target_error);
  }
  // Within the target, or a pending proposal will replace the choice anyway.
  if (!(error > target_error) || basis.has_proposal()) return false;
  const uint64_t version = NextVersion(basis);
  GIFT_RETURN_IF_ERROR(PublishDirect(data.tensor_id, version, {}));
  const std::string label = absl::StrCat("direct (above target: ", error, " > ", target_error, ")");
  if (options_.on_publish) {
    options_.on_publish(data.tensor_id, version, label, transform::RefreshReason::kDrift, 1.0);
  }
  owned.wire.reset();
  owned.reference_version = 0;
  owned.choice = label;
  if (owned.report.has_value()) {
    owned.report->set_choice(label);
    owned.report->set_codecs(PairLabel(pairs[0]));
  }
  owned.schedule->MarkRefreshed(data.step, std::nullopt, basis.refresh_requests(),
                                /*direct=*/true);
  return true;
}

}  // namespace gift::worker
