#include "worker/owner/basis_owner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec_proto.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transform/transform_selector.h"
#include "worker/owner/sketch_exchange.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {
namespace {

std::string SettingsKey(const policy::TensorSettings& s, const gift::v1::Policy& policy) {
  return absl::StrCat(s.transform.SerializeAsString(), "|", s.period_steps, "|",
                      static_cast<int>(s.selection), "|", policy.refresh().SerializeAsString(), "|",
                      policy.selection().SerializeAsString());
}

// The codecs a version names: none when the tensor travels in its resolved
// codecs (`push`, `pull`), else the target's choice.
control::MemberSession::VersionCodecs CodecsOf(const std::optional<WireChoice>& wire,
                                               const codec::CodecSpec& push,
                                               const codec::CodecSpec& pull) {
  if (!wire.has_value()) return {};
  if (wire->codecs.push == push && wire->codecs.pull.has_value() && *wire->codecs.pull == pull) {
    return {};
  }
  return {.push = codec::ToProto(wire->codecs.push),
          .pull = wire->codecs.pull.has_value() ? std::optional(codec::ToProto(*wire->codecs.pull))
                                                : std::nullopt};
}

// Whether a version or proposal carries `codecs` (unset fields equal unset).
template <typename Version>
bool SameCodecs(const Version& v, const control::MemberSession::VersionCodecs& codecs) {
  return v.push_codec().SerializeAsString() ==
             codecs.push.value_or(gift::v1::CodecSpec()).SerializeAsString() &&
         v.pull_codec().SerializeAsString() ==
             codecs.pull.value_or(gift::v1::CodecSpec()).SerializeAsString();
}

}  // namespace

bool BasisOwner::Eligible(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor,
                          policy::TensorSettings* settings, std::string* key) const {
  const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
  if (basis == nullptr || basis->owner_member_id() != session_->member_id()) return false;
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  *settings = policy::ResolveTensorSettings(policy, tensor.name(), shape);
  if (settings->selection == policy::Selection::kDirect || !policy::IsTransformable(shape)) {
    return false;
  }
  *key = SettingsKey(*settings, policy);
  return true;
}

void BasisOwner::SyncView(uint64_t tensor_id) {
  auto it = owned_.find(tensor_id);
  absl::MutexLock lock(&views_mu_);
  if (it == owned_.end() || !it->second.schedule.has_value()) {
    views_.erase(tensor_id);
    return;
  }
  const Owned& owned = it->second;
  views_.insert_or_assign(tensor_id,
                          StepView{.settings_key = owned.settings_key,
                                   .schedule = *owned.schedule,
                                   .measures = (owned.schedule->options().drift_threshold > 0.0 &&
                                                owned.reference_version != 0) ||
                                               owned.wire.has_value()});
}

BasisOwner::Owned* BasisOwner::Entry(const gift::v1::ClusterState& state,
                                     const gift::v1::TensorInfo& tensor) {
  policy::TensorSettings settings;
  std::string key;
  if (!Eligible(state, tensor, &settings, &key)) {
    owned_.erase(tensor.tensor_id());
    return nullptr;
  }
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  Owned& owned = owned_[tensor.tensor_id()];
  if (owned.settings_key == key && owned.geometry.has_value()) return &owned;
  // New, or the policy changed: start the statistics and the schedule over.
  owned = Owned{.settings_key = key, .settings = settings};
  auto geometry = transform::TensorGeometry::Create(
      shape[0], shape[1], GeometryOptionsFor(settings, tensor.tensor_id()));
  auto schedule = transform::RefreshSchedule::Create(
      {.period_steps = static_cast<int64_t>(std::max<uint32_t>(1, settings.period_steps)),
       .drift_threshold = policy.refresh().drift_threshold(),
       .collect_period =
           static_cast<int64_t>(std::max<uint32_t>(1, settings.transform.collect_period())),
       .direct_collect_stride =
           static_cast<int64_t>(std::max<uint32_t>(1, settings.transform.direct_collect_stride())),
       .measure_period =
           static_cast<int64_t>(std::max<uint32_t>(1, policy.refresh().measure_period())),
       .drift_when_worse_than_direct = settings.selection != policy::Selection::kTransform});
  if (!geometry.ok() || !schedule.ok()) {
    const absl::Status s = !geometry.ok() ? geometry.status() : schedule.status();
    if (options_.on_error) options_.on_error(tensor.tensor_id(), s);
    owned_.erase(tensor.tensor_id());
    return nullptr;
  }
  owned.geometry = *std::move(geometry);
  owned.schedule = *std::move(schedule);
  return &owned;
}

bool BasisOwner::MeasuresAt(const Owned& owned, uint64_t step) const {
  return (owned.reference_version != 0 || owned.wire.has_value()) &&
         owned.schedule->ShouldMeasure(step);
}

bool BasisOwner::WantsStep(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor,
                           uint64_t step, bool* needs_own) const {
  *needs_own = false;
  policy::TensorSettings settings;
  std::string key;
  if (!Eligible(state, tensor, &settings, &key)) return false;
  const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
  absl::MutexLock lock(&views_mu_);
  auto it = views_.find(tensor.tensor_id());
  if (it == views_.end() || it->second.settings_key != key) {
    // New to the owner thread, or its settings changed: the statistics start
    // over, and the first refresh is due once they exist.
    *needs_own = true;
    return true;
  }
  const StepView& view = it->second;
  const bool due =
      view.schedule.Due(step, basis->refresh_requests()) != transform::RefreshReason::kNone;
  const bool measures = view.measures && view.schedule.ShouldMeasure(step);
  *needs_own = due || measures;
  return due || measures || view.schedule.ShouldCollect(step);
}

absl::StatusOr<std::optional<double>> BasisOwner::MeasureRatio(const gift::v1::ClusterState& state,
                                                               const OwnedTensorStep& data,
                                                               uint64_t version) {
  auto spec = codec::FromProto(policy::WithDefaults(state.policy()).transform().push_codec());
  if (!spec.ok()) return spec.status();
  auto active = store_->Get(data.tensor_id, version);
  if (!active.ok()) return active.status();
  const transform::SelectionCandidate candidates[] = {{.label = "active", .transform = *active}};
  const float* grads[] = {data.own.data()};
  auto selection = transform::SelectTransform(grads, static_cast<int64_t>(data.rows),
                                              static_cast<int64_t>(data.cols), candidates,
                                              {.spec = *spec,
                                               .margin = 0.0,
                                               .min_elements = 0,
                                               .tensor_id = data.tensor_id,
                                               .step = data.step,
                                               .codec_options = options_.codec_options});
  if (!selection.ok()) return selection.status();
  if (!selection->measured() || !(selection->errors[0].rel_l2 > 0)) return std::nullopt;
  return selection->errors[1].rel_l2 / selection->errors[0].rel_l2;
}

absl::Status BasisOwner::Observe(const gift::v1::ClusterState& state, const OwnedTensorStep& data) {
  const absl::Status s = ObserveTensor(state, data);
  SyncView(data.tensor_id);
  return s;
}

absl::Status BasisOwner::ObserveTensor(const gift::v1::ClusterState& state,
                                       const OwnedTensorStep& data) {
  const gift::v1::TensorInfo* tensor = nullptr;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.tensor_id() == data.tensor_id) tensor = &t;
  }
  if (tensor == nullptr) return absl::OkStatus();
  Owned* owned = Entry(state, *tensor);
  if (owned == nullptr) return absl::OkStatus();
  budget_.RecordStep(data.step, data.step_seconds);
  if (data.average.size() != data.rows * data.cols ||
      static_cast<int64_t>(data.rows) != owned->geometry->d_out() ||
      static_cast<int64_t>(data.cols) != owned->geometry->d_in()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", data.tensor_id, ": step data is ",
                                                   data.rows, "x", data.cols, " (",
                                                   data.average.size(), " values)"));
  }
  if (owned->schedule->ShouldCollect(data.step)) {
    if (transform::UsesPerWorkerMoments(owned->geometry->options().source)) {
      // A step whose sketch exchange failed adds nothing.
      if (!data.sketch.empty()) {
        if (auto s = owned->geometry->AddPerWorkerAverage(data.sketch); !s.ok()) return s;
      }
    } else if (auto s = owned->geometry->AddReducedGradient(data.average.data()); !s.ok()) {
      return s;
    }
  }
  const gift::v1::TensorBasisState* basis = FindBasisState(state, data.tensor_id);
  std::optional<double> measured;
  const bool measures = data.own.size() == data.average.size() && MeasuresAt(*owned, data.step);
  if (measures && owned->wire.has_value()) {
    GIFT_ASSIGN_OR_RETURN(const bool fell_back, CheckWire(state, *basis, data, *owned));
    if (fell_back) return absl::OkStatus();  // published: no refresh on this state
  } else if (measures) {
    auto ratio = MeasureRatio(state, data, owned->reference_version);
    if (!ratio.ok()) return ratio.status();
    measured = *ratio;
    if (measured.has_value()) {
      // The first measurement of a new basis is its reference: out of
      // sample, unlike the selection's ratio on the refresh step's gradient,
      // which the statistics include (optimistic, most of all for a first
      // basis built from one step).
      if (!owned->schedule->reference_ratio().has_value()) {
        owned->schedule->SetReference(*measured);
      }
      owned->schedule->RecordRatio(*measured);
      gift::v1::TensorErrorRatio report;
      report.set_tensor_id(data.tensor_id);
      report.set_ratio(*measured);
      report.set_step(data.step);
      report.set_reference(*owned->schedule->reference_ratio());
      report.set_choice(owned->choice);
      owned->report = report;
    }
  }
  const transform::RefreshReason reason =
      owned->schedule->Due(data.step, basis->refresh_requests());
  if (reason == transform::RefreshReason::kNone || !owned->geometry->ready() ||
      data.own.size() != data.average.size()) {
    return absl::OkStatus();
  }
  // One proposal at a time: a newer one would only replace it.
  if (basis->has_proposal() && reason != transform::RefreshReason::kRequested) {
    return absl::OkStatus();
  }
  return Refresh(state, *basis, data, *owned, reason);
}

absl::StatusOr<BasisOwner::Choice> BasisOwner::ChooseWithinBudget(
    const gift::v1::ClusterState& state, const OwnedTensorStep& data, const Owned& owned,
    const Choice& full, double direct_error, double power, uint64_t version) {
  const int64_t rows = static_cast<int64_t>(data.rows), cols = static_cast<int64_t>(data.cols);
  GIFT_RETURN_IF_ERROR(TimeTransform(*full.basis, data));  // of the winner
  // The same power at the lower ranks, measured like the refresh's candidates.
  const gift::v1::TransformPolicy& tp = owned.settings.transform;
  std::vector<Choice> choices;
  std::vector<transform::SelectionCandidate> lower;
  for (int64_t r : kBudgetRanks) {
    if (r >= full.rank) break;
    GIFT_ASSIGN_OR_RETURN(
        transform::TensorBasis built,
        owned.geometry->BuildBasis(
            {.tensor_id = data.tensor_id,
             .version = version,
             .power = power,
             .rank = r,
             .side = {.residual = static_cast<transform::ResidualModel>(tp.residual()),
                      .damping_eps = tp.damping_eps()}}));
    auto basis = std::make_shared<const transform::TensorBasisTransform>(std::move(built));
    choices.push_back({.basis = basis, .rank = r, .label = absl::StrCat("p=", power, " r=", r)});
    lower.push_back({.label = choices.back().label, .transform = basis});
  }
  if (!lower.empty()) {
    GIFT_ASSIGN_OR_RETURN(auto spec, codec::FromProto(tp.push_codec()));
    const float* grads[] = {data.own.data()};
    GIFT_ASSIGN_OR_RETURN(transform::Selection measured,
                          transform::SelectTransform(grads, rows, cols, lower,
                                                     {.spec = spec,
                                                      .margin = 0.0,
                                                      .min_elements = 0,
                                                      .tensor_id = data.tensor_id,
                                                      .step = data.step,
                                                      .codec_options = options_.codec_options}));
    for (size_t i = 0; i < choices.size(); ++i) choices[i].error = measured.errors[i + 1].rel_l2;
  }
  choices.push_back(full);

  transform::BudgetedTensor table{.weight = static_cast<double>(rows * cols),
                                  .direct_error = direct_error};
  for (const Choice& c : choices) {
    table.candidates.push_back(
        {.error = c.error,
         .cost = TransformBudget::BasisFlops(c.basis->basis(), rows, cols) * budget_.seconds_per_flop()});
  }
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  const double budget = budget_.OwnerBudget(
      policy.selection().gift_budget(), TransformBudget::ActiveFlops(state, data.step),
      TransformBudget::OwnedShare(state, session_->member_id()));
  GIFT_ASSIGN_OR_RETURN(const int chosen, budget_.Choose(data.tensor_id, std::move(table), budget,
                                                         policy.selection().margin()));
  if (chosen < 0) return Choice{.label = "direct (budget)", .error = direct_error};
  Choice out = choices[chosen];
  if (chosen + 1 < static_cast<int>(choices.size())) out.label += " (budget)";
  return out;
}

std::vector<gift::v1::TensorErrorRatio> BasisOwner::error_ratios() const {
  std::vector<gift::v1::TensorErrorRatio> out;
  for (const auto& [id, owned] : owned_) {
    if (owned.report.has_value()) out.push_back(*owned.report);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.tensor_id() < b.tensor_id(); });
  return out;
}

absl::StatusOr<BasisOwner::Choice> BasisOwner::ChooseMeasured(
    const gift::v1::ClusterState& state, const OwnedTensorStep& data, const Owned& owned,
    absl::Span<const std::shared_ptr<const transform::TensorBasisTransform>> bases,
    absl::Span<const transform::SelectionCandidate> candidates, const codec::CodecSpec& spec,
    int64_t rank, uint64_t version, std::optional<double>* ratio) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  const gift::v1::TransformPolicy& tp = owned.settings.transform;
  const bool forced = owned.settings.selection == policy::Selection::kTransform;
  const float* grads[] = {data.own.data()};
  GIFT_ASSIGN_OR_RETURN(
      transform::Selection selection,
      transform::SelectTransform(
          grads, static_cast<int64_t>(data.rows), static_cast<int64_t>(data.cols), candidates,
          {.spec = spec,
           .margin = forced ? 0.0 : policy.selection().margin(),
           .min_elements = forced ? 0 : static_cast<int64_t>(policy.selection().min_elements()),
           .tensor_id = data.tensor_id,
           .step = data.step,
           .codec_options = options_.codec_options}));
  GIFT_RETURN_IF_ERROR(CheckCancelled(data.tensor_id, version));
  int chosen = selection.chosen_index;
  if (forced && chosen < 0 && selection.measured()) {
    // Always transformed: the best candidate, even when it does not beat direct.
    chosen = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      if (selection.errors[i + 1].rel_l2 < selection.errors[chosen + 1].rel_l2) chosen = int(i);
    }
  }
  Choice choice;
  if (chosen >= 0) {
    choice = {.basis = bases[chosen],
              .rank = rank,
              .label = absl::StrCat(candidates[chosen].label, " r=", rank),
              .error = selection.errors[chosen + 1].rel_l2};
  }
  const bool measured = selection.measured() && selection.errors[0].rel_l2 > 0;
  const double budget_fraction = policy.selection().gift_budget();
  if (!forced && budget_fraction > 0.0 && measured && chosen >= 0) {
    GIFT_ASSIGN_OR_RETURN(choice,
                          ChooseWithinBudget(state, data, owned, choice, selection.errors[0].rel_l2,
                                             tp.powers(chosen), version));
  } else {
    budget_.Forget(data.tensor_id);  // it spends nothing of the budget now
  }
  if (measured) {
    *ratio = choice.basis == nullptr ? 1.0 : choice.error / selection.errors[0].rel_l2;
  }
  return choice;
}

absl::Status BasisOwner::Refresh(const gift::v1::ClusterState& state,
                                 const gift::v1::TensorBasisState& basis,
                                 const OwnedTensorStep& data, Owned& owned,
                                 transform::RefreshReason reason) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  auto spec = codec::FromProto(owned.settings.transform.push_codec());  // the tensor's own
  if (!spec.ok()) return spec.status();
  const uint64_t version = NextVersion(basis);
  const gift::v1::TransformPolicy& tp = owned.settings.transform;

  auto cancelled = [&] { return CheckCancelled(data.tensor_id, version); };
  // The rank takes effect only up to the tensor's larger dimension.
  const int64_t rank =
      std::min<int64_t>(tp.rank(), std::max(owned.geometry->d_out(), owned.geometry->d_in()));

  std::vector<transform::SelectionCandidate> candidates;
  std::vector<std::shared_ptr<const transform::TensorBasisTransform>> bases;
  for (double power : tp.powers()) {
    if (absl::Status s = cancelled(); !s.ok()) return s;
    auto built = owned.geometry->BuildBasis(
        {.tensor_id = data.tensor_id,
         .version = version,
         .power = power,
         .rank = rank,
         .side = {.residual = static_cast<transform::ResidualModel>(tp.residual()),
                  .damping_eps = tp.damping_eps()}});
    if (!built.ok()) return built.status();
    bases.push_back(std::make_shared<const transform::TensorBasisTransform>(*std::move(built)));
    candidates.push_back({.label = absl::StrCat("p=", power), .transform = bases.back()});
  }
  if (absl::Status s = cancelled(); !s.ok()) return s;
  Choice choice;
  std::optional<double> ratio;  // the choice's error over the reference's (direct or the target)
  std::optional<WireChoice> wire;
  if (TargetApplies(policy, owned.settings)) {
    // The fidelity target decides codecs and basis (docs/design.md 3.7).
    GIFT_ASSIGN_OR_RETURN(wire, ChooseWireFor(state, policy, data, owned, bases, candidates));
    if (absl::Status s = cancelled(); !s.ok()) return s;
    choice = wire->candidate < 0
                 ? Choice{.label = "direct", .error = wire->error}
                 : Choice{.basis = bases[wire->candidate],
                          .rank = rank,
                          .label = absl::StrCat(candidates[wire->candidate].label, " r=", rank),
                          .error = wire->error};
    // "[push / pull]", "[target: push / pull]" for the target's own codecs.
    choice.label = absl::StrCat(choice.label, " [", wire->pair == 0 ? "target: " : "",
                                PairLabel(wire->codecs), "]");
    if (wire->target_error > 0) ratio = wire->error / wire->target_error;
    budget_.Forget(data.tensor_id);  // its compute was checked against the whole share
    // Nothing cheaper came near the target: the next refresh, and the
    // statistics, come less often (item 3 of the target: the fixed work
    // scales down with what it can still win).
    const bool hopeless =
        wire->pair == 0 && wire->candidate < 0 && wire->cheaper_gap >= kTargetBackoffGap;
    owned.backoff = hopeless ? std::min(owned.backoff * 2, kMaxTargetBackoff) : 1;
  } else {
    owned.backoff = 1;
    GIFT_ASSIGN_OR_RETURN(choice, ChooseMeasured(state, data, owned, bases, candidates, *spec, rank,
                                                 version, &ratio));
  }
  // Under the target a tensor whose policy codec is not the target's travels
  // in the target's codecs when they win (named by the version).
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec pull, codec::FromProto(tp.pull_codec()));
  const control::MemberSession::VersionCodecs codecs = CodecsOf(wire, *spec, pull);

  // The newest committed version (it may activate after this step): what the
  // tensor will travel as, unless a proposal replaces it.
  const gift::v1::BasisVersion* latest =
      basis.versions().empty() ? nullptr : &basis.versions(basis.versions_size() - 1);
  const bool latest_same = latest == nullptr ? !codecs.push.has_value()
                                             : latest->direct() && SameCodecs(*latest, codecs);
  const bool pending_same =
      basis.has_proposal() && basis.proposal().direct() && SameCodecs(basis.proposal(), codecs);
  if (choice.basis == nullptr) {
    // Direct: publish a direct version only when the tensor will travel
    // another way (by its newest version, or a pending proposal).
    if (!latest_same || (basis.has_proposal() && !pending_same)) {
      GIFT_RETURN_IF_ERROR(PublishDirect(data.tensor_id, version, codecs));
      if (options_.on_publish) {
        options_.on_publish(data.tensor_id, version, choice.label, reason, ratio);
      }
    }
    owned.reference_version = 0;
  } else {
    const std::string bytes = transform::SerializeTensorBasis(choice.basis->basis());
    auto published =
        session_->PublishBasis(data.tensor_id, version, static_cast<uint32_t>(choice.rank), bytes,
                               /*direct=*/false, codecs);
    if (!published.ok()) return published.status();
    store_->Put(data.tensor_id, version, choice.basis);
    ++publications_;
    if (options_.on_publish) {
      options_.on_publish(data.tensor_id, version, choice.label, reason, ratio);
    }
    owned.reference_version = version;
  }
  owned.ratio = ratio;
  owned.choice = choice.label;
  owned.wire = wire.has_value() && wire->pair != 0 ? wire : std::nullopt;
  if (ratio.has_value()) {  // until the new basis is measured (reference 0: none yet)
    gift::v1::TensorErrorRatio report;
    report.set_tensor_id(data.tensor_id);
    report.set_ratio(*ratio);
    report.set_step(data.step);
    report.set_choice(choice.label);
    if (wire.has_value()) {
      report.set_codecs(PairLabel(wire->codecs));
      report.set_bytes_per_step(wire->bytes_per_step);
      report.set_target_bytes_per_step(wire->target_bytes_per_step);
      report.set_error(wire->error);
      report.set_target_error(wire->target_error);
    }
    owned.report = report;
  }
  // The drift reference is the new basis's first measurement once active.
  owned.schedule->MarkRefreshed(data.step, std::nullopt, basis.refresh_requests(),
                                /*direct=*/choice.basis == nullptr, owned.backoff);
  return absl::OkStatus();
}

uint64_t BasisOwner::NextVersion(const gift::v1::TensorBasisState& basis) {
  uint64_t v = 0;
  for (const gift::v1::BasisVersion& b : basis.versions()) v = std::max(v, b.version());
  if (basis.has_proposal()) v = std::max(v, basis.proposal().version());
  return v + 1;
}

absl::Status BasisOwner::CheckCancelled(uint64_t tensor_id, uint64_t version) const {
  if (options_.cancelled && options_.cancelled()) {
    return absl::CancelledError(absl::StrCat("tensor ", tensor_id, ": refresh to version ", version,
                                             " abandoned: shutting down"));
  }
  return absl::OkStatus();
}

absl::Status BasisOwner::TimeTransform(const transform::TensorBasisTransform& basis,
                                       const OwnedTensorStep& data) {
  const int64_t rows = static_cast<int64_t>(data.rows), cols = static_cast<int64_t>(data.cols);
  std::vector<float> scratch(data.own.size());
  const auto start = std::chrono::steady_clock::now();
  GIFT_RETURN_IF_ERROR(basis.Forward(data.own.data(), rows, cols, scratch.data()));
  GIFT_RETURN_IF_ERROR(basis.Inverse(scratch.data(), rows, cols, scratch.data()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  budget_.RecordTransform(TransformBudget::BasisFlops(basis.basis(), rows, cols), seconds);
  return absl::OkStatus();
}

absl::Status BasisOwner::PublishDirect(uint64_t tensor_id, uint64_t version,
                                       const control::MemberSession::VersionCodecs& codecs) {
  auto published = session_->PublishBasis(tensor_id, version, 0, "", /*direct=*/true, codecs);
  if (!published.ok()) return published.status();
  ++publications_;
  return absl::OkStatus();
}

absl::Status BasisOwner::AddActivationFactor(const gift::v1::ClusterState& state,
                                             uint64_t tensor_id, const std::vector<float>& gram,
                                             uint64_t num_samples) {
  const gift::v1::TensorInfo* tensor = nullptr;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.tensor_id() == tensor_id) tensor = &t;
  }
  if (tensor == nullptr) return absl::OkStatus();
  Owned* owned = Entry(state, *tensor);
  SyncView(tensor_id);
  if (owned == nullptr || !transform::UsesActivationFactor(owned->geometry->options().source)) {
    return absl::OkStatus();
  }
  const int64_t n = owned->geometry->d_in();
  if (gram.size() != static_cast<size_t>(n * n) || num_samples == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor_id, ": the Gram matrix has ",
                                                   gram.size(), " values for d_in ", n, " and ",
                                                   num_samples, " samples"));
  }
  Eigen::MatrixXd factor =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          gram.data(), n, n)
          .cast<double>() /
      static_cast<double>(num_samples);
  return owned->geometry->AddActivationFactor(factor);
}

}  // namespace gift::worker
