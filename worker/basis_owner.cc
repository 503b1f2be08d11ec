#include "worker/basis_owner.h"

#include <algorithm>
#include <memory>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transform/transform_selector.h"
#include "worker/step_planner.h"

namespace gift::worker {
namespace {

transform::GeometrySource SourceOf(gift::v1::GeometrySource source) {
  // kPerWorkerGradients needs sketches on the data path (not carried yet).
  return source == gift::v1::GEOMETRY_SOURCE_ACTIVATIONS ? transform::GeometrySource::kActivations
                                                         : transform::GeometrySource::kGradients;
}

std::string SettingsKey(const policy::TensorSettings& s, const gift::v1::Policy& policy) {
  return absl::StrCat(s.transform.SerializeAsString(), "|", s.period_steps, "|",
                      static_cast<int>(s.selection), "|", policy.refresh().SerializeAsString(), "|",
                      policy.selection().SerializeAsString());
}

uint64_t NextVersion(const gift::v1::TensorBasisState& basis) {
  uint64_t v = 0;
  for (const gift::v1::BasisVersion& b : basis.versions()) v = std::max(v, b.version());
  if (basis.has_proposal()) v = std::max(v, basis.proposal().version());
  return v + 1;
}

}  // namespace

const gift::v1::TensorBasisState* FindBasisState(const gift::v1::ClusterState& state,
                                                 uint64_t tensor_id) {
  for (const gift::v1::TensorBasisState& b : state.bases()) {
    if (b.tensor_id() == tensor_id) return &b;
  }
  return nullptr;
}

BasisOwner::Owned* BasisOwner::Entry(const gift::v1::ClusterState& state,
                                     const gift::v1::TensorInfo& tensor) {
  const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
  if (basis == nullptr || basis->owner_member_id() != session_->member_id()) {
    owned_.erase(tensor.tensor_id());
    return nullptr;
  }
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  const policy::TensorSettings settings =
      policy::ResolveTensorSettings(policy, tensor.name(), shape);
  if (settings.selection == policy::Selection::kDirect || !policy::IsTransformable(shape)) {
    owned_.erase(tensor.tensor_id());
    return nullptr;
  }
  const std::string key = SettingsKey(settings, policy);
  Owned& owned = owned_[tensor.tensor_id()];
  if (owned.settings_key == key && owned.geometry.has_value()) return &owned;
  // New, or the policy changed: start the statistics and the schedule over.
  owned = Owned{.settings_key = key, .settings = settings};
  auto geometry = transform::TensorGeometry::Create(
      shape[0], shape[1],
      {.sides = static_cast<transform::Sides>(settings.transform.sides()),
       .source = SourceOf(settings.transform.source()),
       .ema_decay = settings.transform.ema_decay(),
       .sketch_seed = tensor.tensor_id()});
  auto schedule = transform::RefreshSchedule::Create(
      {.period_steps = static_cast<int64_t>(std::max<uint32_t>(1, settings.period_steps)),
       .drift_threshold = policy.refresh().drift_threshold(),
       .collect_period =
           static_cast<int64_t>(std::max<uint32_t>(1, settings.transform.collect_period()))});
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

bool BasisOwner::WantsStep(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor,
                           uint64_t step, bool* needs_own) {
  *needs_own = false;
  Owned* owned = Entry(state, tensor);
  if (owned == nullptr) return false;
  const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
  const bool due = owned->schedule->Due(step, std::nullopt, basis->refresh_requests()) !=
                   transform::RefreshReason::kNone;
  *needs_own = due;
  return due || owned->schedule->ShouldCollect(step);
}

absl::Status BasisOwner::Observe(const gift::v1::ClusterState& state, const OwnedTensorStep& data) {
  const gift::v1::TensorInfo* tensor = nullptr;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.tensor_id() == data.tensor_id) tensor = &t;
  }
  if (tensor == nullptr) return absl::OkStatus();
  Owned* owned = Entry(state, *tensor);
  if (owned == nullptr) return absl::OkStatus();
  if (data.average.size() != data.rows * data.cols ||
      static_cast<int64_t>(data.rows) != owned->geometry->d_out() ||
      static_cast<int64_t>(data.cols) != owned->geometry->d_in()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", data.tensor_id, ": step data is ",
                                                   data.rows, "x", data.cols, " (",
                                                   data.average.size(), " values)"));
  }
  if (owned->schedule->ShouldCollect(data.step)) {
    if (auto s = owned->geometry->AddReducedGradient(data.average.data()); !s.ok()) return s;
  }
  const gift::v1::TensorBasisState* basis = FindBasisState(state, data.tensor_id);
  // Nothing is measured between refreshes yet, so there is no current ratio
  // to compare with the reference: refreshes are first, periodic or
  // requested (the ratio at the refresh is logged and kept as reference).
  const transform::RefreshReason reason =
      owned->schedule->Due(data.step, std::nullopt, basis->refresh_requests());
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

absl::Status BasisOwner::Refresh(const gift::v1::ClusterState& state,
                                 const gift::v1::TensorBasisState& basis,
                                 const OwnedTensorStep& data, Owned& owned,
                                 transform::RefreshReason reason) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  auto spec = codec::FromProto(owned.settings.transform.push_codec());  // the tensor's own
  if (!spec.ok()) return spec.status();
  const uint64_t version = NextVersion(basis);
  const gift::v1::TransformPolicy& tp = owned.settings.transform;

  auto cancelled = [&]() -> absl::Status {
    if (options_.cancelled && options_.cancelled()) {
      return absl::CancelledError(absl::StrCat("tensor ", data.tensor_id, ": refresh to version ",
                                               version, " abandoned: shutting down"));
    }
    return absl::OkStatus();
  };
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
  const bool forced = owned.settings.selection == policy::Selection::kTransform;
  const float* grads[] = {data.own.data()};
  auto selection = transform::SelectTransform(
      grads, static_cast<int64_t>(data.rows), static_cast<int64_t>(data.cols), candidates,
      {.spec = *spec,
       .margin = forced ? 0.0 : policy.selection().margin(),
       .min_elements = forced ? 0 : static_cast<int64_t>(policy.selection().min_elements()),
       .tensor_id = data.tensor_id,
       .step = data.step,
       .codec_options = options_.codec_options});
  if (!selection.ok()) return selection.status();
  if (absl::Status s = cancelled(); !s.ok()) return s;
  int chosen = selection->chosen_index;
  if (forced && chosen < 0 && selection->measured()) {
    // Always transformed: the best candidate, even when it does not beat direct.
    chosen = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      if (selection->errors[i + 1].rel_l2 < selection->errors[chosen + 1].rel_l2) chosen = int(i);
    }
  }
  std::optional<double> ratio;
  if (selection->measured() && selection->errors[0].rel_l2 > 0) {
    ratio = chosen < 0 ? 1.0 : selection->errors[chosen + 1].rel_l2 / selection->errors[0].rel_l2;
  }

  const gift::v1::BasisVersion* active = ActiveVersion(basis, data.step);
  const bool active_direct = active == nullptr || active->direct();
  const bool pending_direct = basis.has_proposal() && basis.proposal().direct();
  if (chosen < 0) {
    // Direct: publish a direct version only when the tensor is transformed
    // now (or will be by a pending proposal).
    if (!active_direct || (basis.has_proposal() && !pending_direct)) {
      auto published = session_->PublishBasis(data.tensor_id, version, 0, "", /*direct=*/true);
      if (!published.ok()) return published.status();
      ++publications_;
      if (options_.on_publish)
        options_.on_publish(data.tensor_id, version, "direct", reason, ratio);
    }
  } else {
    const transform::TensorBasis& chosen_basis = bases[chosen]->basis();
    const std::string bytes = transform::SerializeTensorBasis(chosen_basis);
    auto published = session_->PublishBasis(data.tensor_id, version, tp.rank(), bytes);
    if (!published.ok()) return published.status();
    store_->Put(data.tensor_id, version, bases[chosen]);
    ++publications_;
    if (options_.on_publish) {
      options_.on_publish(data.tensor_id, version, candidates[chosen].label, reason, ratio);
    }
  }
  owned.ratio = ratio;
  owned.schedule->MarkRefreshed(data.step, ratio, basis.refresh_requests());
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
  if (owned == nullptr ||
      owned->geometry->options().source != transform::GeometrySource::kActivations) {
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
