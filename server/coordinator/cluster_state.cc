#include "server/coordinator/cluster_state.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/crc32c.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/policy.h"
#include "common/transform/basis_serialization.h"
#include "server/coordinator/cluster_state_run.h"
#include "server/coordinator/shard_map.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

class SystemClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Clock* RealClock() {
  static Clock* clock = new SystemClock();
  return clock;
}

absl::StatusOr<std::unique_ptr<ClusterStateMachine>> ClusterStateMachine::Create(
    const ClusterOptions& options, std::unique_ptr<StateStore> store, Clock* clock) {
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease TTL must be positive");
  }
  std::unique_ptr<ClusterStateMachine> state(
      new ClusterStateMachine(options, std::move(store), clock));
  absl::MutexLock lock(&state->mu_);
  GIFT_RETURN_IF_ERROR(state->LoadLocked());
  GIFT_RETURN_IF_ERROR(state->CommitLocked());
  return state;
}

void ClusterStateMachine::SetChangeCallback(std::function<void()> callback) {
  on_change_ = std::move(callback);
}

int64_t ClusterStateMachine::NowMsLocked() const { return absl::ToUnixMillis(clock_->Now()); }

// ---- membership -----------------------------------------------------------

void ClusterStateMachine::ExpireLeasesLocked() {
  const std::vector<std::string> expired = membership_.Expired(NowMsLocked());
  if (expired.empty()) return;
  for (const std::string& id : expired) membership_.Remove(id, "expire", NowMsLocked());
  OnMembershipChangedLocked();
}

absl::Status ClusterStateMachine::ExpireLeases() {
  return Run([] { return absl::OkStatus(); });
}

void ClusterStateMachine::AssignOwnersLocked() {
  const std::map<std::string, gift::v1::Member>& members = membership_.members();
  std::map<std::string, uint64_t> load;  // owned elements per eligible worker
  for (const auto& [id, m] : members) {
    if (IsWorker(m) && m.state() != gift::v1::MEMBER_STATE_DRAINING) load[id] = 0;
  }
  if (load.empty()) {  // only draining workers (or none): they still may own
    for (const auto& [id, m] : members) {
      if (IsWorker(m)) load[id] = 0;
    }
  }
  std::vector<uint64_t> orphans;
  for (const auto& [tid, basis] : ledger_.bases()) {
    auto owner = members.find(basis.owner_member_id());
    if (owner != members.end() && IsWorker(owner->second)) {
      auto l = load.find(basis.owner_member_id());
      if (l != load.end()) l->second += registry_.at(tid).num_elements();
    } else if (policy::IsTransformable(registry_.at(tid).shape())) {
      orphans.push_back(tid);
    }
  }
  std::sort(orphans.begin(), orphans.end(), [&](uint64_t a, uint64_t b) {
    if (registry_.at(a).num_elements() != registry_.at(b).num_elements()) {
      return registry_.at(a).num_elements() > registry_.at(b).num_elements();
    }
    return a < b;
  });
  for (uint64_t tid : orphans) {
    std::string best;
    for (const auto& [id, l] : load) {
      if (best.empty() || std::make_pair(l, members.at(id).rank()) <
                              std::make_pair(load[best], members.at(best).rank())) {
        best = id;
      }
    }
    if (ledger_.bases().at(tid).owner_member_id() == best) continue;
    ledger_.SetOwner(tid, best);
    if (!best.empty()) load[best] += registry_.at(tid).num_elements();
  }
}

void ClusterStateMachine::OnMembershipChangedLocked() {
  // Joining workers whose admit step has come enter with this change.
  const std::vector<std::string> admitted = membership_.AdmitReady();
  epoch_started_ = clock_->Now();
  membership_.Rerank();
  AssignOwnersLocked();
  std::vector<gift::v1::TensorInfo> tensors;
  for (const auto& [tid, t] : registry_.tensors()) tensors.push_back(t);
  meta_.shard_map = ComputeShardMap(tensors, membership_.Count(gift::v1::MEMBER_ROLE_SERVER),
                                    options_.chunk_bytes, membership_.epoch());
  // Leavers no longer count towards acknowledgements.
  for (const auto& [tid, b] : ledger_.bases()) MaybeCommitLocked(ledger_.Find(tid).value());
  TouchLocked();
  for (const std::string& id : admitted) {
    membership_.Record("join", *membership_.Live(id).value(), NowMsLocked());
  }
  // The horizon held below the admit step moves on.
  if (!admitted.empty()) AdvanceFrozenLocked();
}

absl::StatusOr<gift::v1::LeaveResponse> ClusterStateMachine::Leave(
    const gift::v1::LeaveRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::LeaveResponse> {
    GIFT_RETURN_IF_ERROR(membership_.Live(request.member_id()).status());
    membership_.Remove(request.member_id(), "leave", NowMsLocked());
    OnMembershipChangedLocked();
    gift::v1::LeaveResponse response;
    response.set_epoch(membership_.epoch());
    return response;
  });
}

absl::StatusOr<gift::v1::HeartbeatResponse> ClusterStateMachine::Heartbeat(
    const gift::v1::HeartbeatRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::HeartbeatResponse> {
    GIFT_ASSIGN_OR_RETURN(gift::v1::Member * m, membership_.Live(request.member_id()));
    if (request.epoch() > membership_.epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch ", request.epoch(), " is ahead of the coordinator's epoch ", membership_.epoch()));
    }
    m->set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    // A joining worker has no steps in this cluster yet.
    const bool joining = membership_.IsJoining(request.member_id());
    // An owner's error ratios: kept for GetStatus, no revision of their own.
    for (const gift::v1::TensorErrorRatio& r : request.error_ratios()) {
      absl::StatusOr<gift::v1::TensorBasisState*> basis = ledger_.Find(r.tensor_id());
      if (basis.ok() && (*basis)->owner_member_id() == request.member_id()) {
        *(*basis)->mutable_error_ratio() = r;
      }
    }
    if (IsWorker(*m) && request.has_client()) NoteClientLocked(m, request.client());
    if (!joining && request.last_step() > m->last_step()) {
      m->set_last_step(request.last_step());
      uint64_t min_next = 0, max_last = 0;
      if (IsWorker(*m)) {
        membership_.NoteStepped();
        NoteStepReachedLocked(m->last_step());
      }
      const uint64_t revision = meta_.revision;
      if (IsWorker(*m)) {
        // The member workers have completed the steps below a joiner's
        // admit step: it enters now (and the horizon moves past it).
        if (membership_.JoinerReady()) OnMembershipChangedLocked();
        AdvanceFrozenLocked();
        membership_.WorkerSteps(&min_next, &max_last);
        if (ledger_.PruneAll(min_next)) TouchLocked();
      }
      if (meta_.revision != revision) membership_.MarkChanged(*m);
    }
    gift::v1::HeartbeatResponse response;
    if (!joining && IsWorker(*m)) {
      // In memory only (a heartbeat that only reports this makes no revision).
      m->set_waiting_step(request.waiting_step() > m->last_step() ? request.waiting_step() : 0);
      if (m->waiting_step() > 0) {
        NoteStepReachedLocked(m->waiting_step());
        *response.mutable_step_wait() = StepWaitLocked(m->waiting_step());
      }
    }
    response.set_epoch(membership_.epoch());
    response.set_revision(meta_.revision);
    response.set_lease_expires_unix_ms(m->lease_expires_unix_ms());
    response.set_state(m->state());
    return response;
  });
}

void ClusterStateMachine::NoteStepReachedLocked(uint64_t step) {
  if (step <= max_step_seen_) return;
  max_step_seen_ = step;
  constexpr size_t kMaxTrackedSteps = 4096;
  if (step_first_seen_.size() < kMaxTrackedSteps) step_first_seen_.emplace(step, clock_->Now());
  // Keep the entries at or above the oldest incomplete step.
  uint64_t min_next = 0, max_last = 0;
  membership_.WorkerSteps(&min_next, &max_last);
  step_first_seen_.erase(step_first_seen_.begin(), step_first_seen_.lower_bound(min_next));
}

int64_t ClusterStateMachine::StepWaitedMsLocked(uint64_t step) const {
  absl::Time since = std::max(epoch_started_, started_);
  auto first = step_first_seen_.lower_bound(step);
  if (first != step_first_seen_.end()) since = std::max(since, first->second);
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(clock_->Now() - since));
}

gift::v1::StepWait ClusterStateMachine::StepWaitLocked(uint64_t step) const {
  gift::v1::StepWait wait;
  wait.set_step(step);
  wait.set_waited_ms(StepWaitedMsLocked(step));
  std::vector<const gift::v1::Member*> missing;
  for (const auto& [id, w] : membership_.members()) {
    if (IsWorker(w) && w.last_step() < step && w.waiting_step() < step) missing.push_back(&w);
  }
  std::sort(
      missing.begin(), missing.end(),
      [](const gift::v1::Member* a, const gift::v1::Member* b) { return a->rank() < b->rank(); });
  for (const gift::v1::Member* w : missing) {
    gift::v1::Member* m = wait.add_missing();
    m->set_member_id(w->member_id());
    m->set_name(w->name());
    m->set_role(w->role());
    m->set_rank(w->rank());
    m->set_node(w->node());
    m->set_control_address(w->control_address());
    m->set_last_step(w->last_step());
    m->set_registration_error(w->registration_error());
  }
  return wait;
}

absl::StatusOr<gift::v1::DrainResponse> ClusterStateMachine::Drain(
    const gift::v1::DrainRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::DrainResponse> {
    gift::v1::Member* member = nullptr;
    if (!request.member_id().empty()) {
      GIFT_ASSIGN_OR_RETURN(member, membership_.Live(request.member_id()));
    } else if (!request.name().empty()) {
      member = membership_.FindByName(request.name());
      if (member == nullptr) {
        return absl::NotFoundError(absl::StrCat("no live member named '", request.name(), "'"));
      }
    } else {
      return absl::InvalidArgumentError("give member_id or name");
    }
    if (member->state() != gift::v1::MEMBER_STATE_DRAINING) {
      member->set_state(gift::v1::MEMBER_STATE_DRAINING);
      membership_.MarkChanged(*member);
      membership_.Record("drain", *member, NowMsLocked());
      TouchLocked();
    }
    gift::v1::DrainResponse response;
    *response.mutable_member() = *member;
    return response;
  });
}

// ---- bases ----------------------------------------------------------------

void ClusterStateMachine::AdvanceFrozenLocked() {
  uint64_t min_next = 0, max_step = 0;
  if (!membership_.WorkerSteps(&min_next, &max_step)) return;
  uint64_t frozen = max_step + options_.step_window;
  // No step at or above a joining worker's admit step starts before it is
  // in the world.
  if (uint64_t admit = 0; membership_.MinAdmitStep(&admit)) frozen = std::min(frozen, admit - 1);
  if (frozen <= meta_.frozen_through_step) return;
  ledger_.Postpone(frozen, meta_.policy.refresh().activation_lead_steps());
  meta_.frozen_through_step = frozen;
  TouchLocked();
}

void ClusterStateMachine::MaybeCommitLocked(gift::v1::TensorBasisState* basis) {
  if (!ledger_.MaybeCommit(basis, membership_.WorkerIds())) return;
  uint64_t min_next = 0, max_last = 0;
  if (membership_.WorkerSteps(&min_next, &max_last)) ledger_.Prune(basis, min_next);
  TouchLocked();
}

absl::Status ClusterStateMachine::CheckPublishLocked(const gift::v1::BasisHeader& header) {
  GIFT_RETURN_IF_ERROR(membership_.LiveWorker(header.member_id()).status());
  GIFT_ASSIGN_OR_RETURN(gift::v1::TensorBasisState * basis, ledger_.Find(header.tensor_id()));
  const gift::v1::TensorInfo& tensor = registry_.at(header.tensor_id());
  if (basis->owner_member_id() != header.member_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", header.member_id(), " does not own tensor '", tensor.name(),
                     "' (id ", tensor.tensor_id(), "); its owner is ",
                     basis->owner_member_id().empty() ? "nobody" : basis->owner_member_id()));
  }
  const uint64_t last = BasisLedger::LastVersion(*basis);
  if (header.version() <= last) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", tensor.name(), "': version ", header.version(),
                     " is not above the last published version ", last));
  }
  for (const auto& [which, codec] :
       {std::pair{"push", &header.push_codec()}, std::pair{"pull", &header.pull_codec()}}) {
    if (codec->format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) continue;  // the tensor's own
    if (auto spec = codec::FromProto(*codec); !spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("version ", header.version(), " ", which,
                                                     " codec: ", spec.status().message()));
    }
  }
  if (header.direct()) {
    if (header.size_bytes() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a direct version carries no bytes, got size_bytes ", header.size_bytes()));
    }
    return absl::OkStatus();
  }
  if (header.rank() < 1) return absl::InvalidArgumentError("rank must be >= 1");
  if (header.size_bytes() == 0) return absl::InvalidArgumentError("size_bytes is 0");
  if (header.size_bytes() > options_.max_basis_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("basis of ", header.size_bytes(),
                                                     " bytes is above the limit of ",
                                                     options_.max_basis_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ClusterStateMachine::CheckPublish(const gift::v1::BasisHeader& header) {
  return Run([&] { return CheckPublishLocked(header); });
}

absl::StatusOr<gift::v1::PublishBasisResponse> ClusterStateMachine::PublishBasis(
    const gift::v1::BasisHeader& header, std::string bytes) {
  // Byte checks first, without the lock: a basis may be large.
  if (bytes.size() != header.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "received ", bytes.size(), " bytes, the header announced ", header.size_bytes()));
  }
  std::optional<transform::TensorBasisHeader> parsed;
  if (!header.direct()) {
    const uint32_t crc = crc32c::Value(bytes.data(), bytes.size());
    if (crc != header.crc32c()) {
      return absl::DataLossError(
          absl::StrCat("basis bytes have CRC-32C ", crc, ", the header says ", header.crc32c()));
    }
    absl::StatusOr<transform::TensorBasis> basis = transform::ParseTensorBasis(bytes);
    if (!basis.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("basis bytes do not parse: ", basis.status().message()));
    }
    parsed = basis->header();
  }
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  return Run([&]() -> absl::StatusOr<gift::v1::PublishBasisResponse> {
    GIFT_RETURN_IF_ERROR(CheckPublishLocked(header));
    const gift::v1::TensorInfo& tensor = registry_.at(header.tensor_id());
    if (parsed.has_value()) {
      if (!policy::IsTransformable(tensor.shape())) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor.name(), "' of shape ",
                                                       ShapeString(tensor.shape()),
                                                       " cannot carry a basis"));
      }
      if (parsed->tensor_id != tensor.tensor_id() || parsed->version != header.version() ||
          parsed->d_out != tensor.shape(0) || parsed->d_in != tensor.shape(1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "basis bytes are for tensor ", parsed->tensor_id, " version ", parsed->version,
            " shape [", parsed->d_out, ", ", parsed->d_in, "], not tensor ", tensor.tensor_id(),
            " version ", header.version(), " shape ", ShapeString(tensor.shape())));
      }
    }
    const uint64_t tentative =
        meta_.frozen_through_step + meta_.policy.refresh().activation_lead_steps();
    ledger_.Propose(header, tentative, shared);
    TouchLocked();
    MaybeCommitLocked(ledger_.Find(header.tensor_id()).value());
    gift::v1::PublishBasisResponse response;
    response.set_tentative_activation_step(tentative);
    return response;
  });
}

absl::StatusOr<ClusterStateMachine::BasisData> ClusterStateMachine::FetchBasis(
    const gift::v1::FetchBasisRequest& request) {
  BasisData data;
  bool need_load = false;
  absl::Status status = Run([&]() -> absl::Status {
    GIFT_RETURN_IF_ERROR(membership_.Live(request.member_id()).status());
    GIFT_ASSIGN_OR_RETURN(data.header, ledger_.Header(request.tensor_id(), request.version()));
    if (data.header.direct()) return absl::OkStatus();
    data.bytes = ledger_.CachedBytes(request.tensor_id(), request.version());
    need_load = data.bytes == nullptr;
    return absl::OkStatus();
  });
  GIFT_RETURN_IF_ERROR(status);
  if (need_load) {
    // After a restart: read from the file without holding the lock.
    GIFT_ASSIGN_OR_RETURN(std::string bytes,
                          store_->LoadBasisBytes(request.tensor_id(), request.version()));
    data.bytes = std::make_shared<const std::string>(std::move(bytes));
    absl::MutexLock lock(&mu_);
    ledger_.CacheBytes(request.tensor_id(), request.version(), data.bytes);
  }
  return data;
}

absl::StatusOr<gift::v1::AckBasisResponse> ClusterStateMachine::AckBasis(
    const gift::v1::AckBasisRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::AckBasisResponse> {
    GIFT_RETURN_IF_ERROR(membership_.LiveWorker(request.member_id()).status());
    GIFT_ASSIGN_OR_RETURN(gift::v1::TensorBasisState * basis, ledger_.Find(request.tensor_id()));
    gift::v1::AckBasisResponse response;
    if (ledger_.Ack(request.tensor_id(), request.version(), request.member_id())) {
      // Only the commit (MaybeCommitLocked) is news for watchers: bumping
      // the revision on every acknowledgement sent each watcher a full
      // snapshot per ack, P^2 snapshots per refresh.
      MarkDirtyLocked();
      MaybeCommitLocked(basis);
    }
    for (const gift::v1::BasisVersion& v : basis->versions()) {
      if (v.version() == request.version()) {
        response.set_committed(true);
        response.set_activation_step(v.activation_step());
        return response;
      }
    }
    if (basis->has_proposal() && basis->proposal().version() == request.version()) {
      return response;  // acknowledged, waiting for the others
    }
    return absl::NotFoundError(absl::StrCat("tensor ", request.tensor_id(),
                                            " has no pending or committed version ",
                                            request.version()));
  });
}

// ---- policy ---------------------------------------------------------------

gift::v1::Policy ClusterStateMachine::GetPolicy() {
  absl::MutexLock lock(&mu_);
  return meta_.policy;
}

absl::StatusOr<gift::v1::Policy> ClusterStateMachine::SetPolicyLocked(
    const gift::v1::Policy& policy, uint64_t expected_version) {
  if (expected_version != 0 && expected_version != meta_.policy.version()) {
    return absl::AbortedError(absl::StrCat("the policy is at version ", meta_.policy.version(),
                                           ", not the expected version ", expected_version,
                                           "; read it again and retry"));
  }
  gift::v1::Policy next = policy::WithDefaults(policy);
  GIFT_RETURN_IF_ERROR(policy::Validate(next));
  GIFT_RETURN_IF_ERROR(policy::ValidateRanksForTensors(next, registry_.Shapes({})));
  next.set_version(meta_.policy.version() + 1);
  // Node-local aggregation changes how every worker routes its chunks: only
  // at an epoch boundary, so that no step mixes the two (docs/design.md
  // section 6.7).
  const bool new_epoch = policy::WithDefaults(meta_.policy).hierarchy() != next.hierarchy();
  meta_.policy = std::move(next);
  if (new_epoch) {
    membership_.BumpEpoch();
    OnMembershipChangedLocked();
  }
  TouchLocked();
  Log(Level::kInfo, "policy_set", {{"version", meta_.policy.version()}});
  return meta_.policy;
}

absl::StatusOr<gift::v1::Policy> ClusterStateMachine::SetPolicy(
    const gift::v1::SetPolicyRequest& request) {
  return Run([&] { return SetPolicyLocked(request.policy(), request.expected_version()); });
}

std::vector<std::string> ClusterStateMachine::RequestRefreshLocked(const std::string& glob) {
  std::vector<std::string> names;
  for (const auto& [tid, basis] : ledger_.bases()) {
    const gift::v1::TensorInfo& t = registry_.at(tid);
    if (!policy::IsTransformable(t.shape())) continue;
    if (!glob.empty() && !policy::GlobMatch(glob, t.name())) continue;
    ledger_.RequestRefresh(tid);
    names.push_back(t.name());
  }
  if (!names.empty()) {
    TouchLocked();
    Log(Level::kInfo, "refresh_requested",
        {{"glob", glob.empty() ? "*" : glob}, {"tensors", names.size()}});
  }
  return names;
}

absl::StatusOr<gift::v1::RequestRefreshResponse> ClusterStateMachine::RequestRefresh(
    const gift::v1::RequestRefreshRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::RequestRefreshResponse> {
    gift::v1::RequestRefreshResponse response;
    if (!request.tensor_glob().empty()) {
      GIFT_RETURN_IF_ERROR(policy::ValidateGlob("tensor_glob", request.tensor_glob()));
    }
    for (std::string& name : RequestRefreshLocked(request.tensor_glob())) {
      response.add_tensors(std::move(name));
    }
    return response;
  });
}

absl::StatusOr<gift::v1::SetRankResponse> ClusterStateMachine::SetRank(
    const gift::v1::SetRankRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::SetRankResponse> {
    if (request.rank() < 1) return absl::InvalidArgumentError("rank = 0: must be >= 1");
    gift::v1::Policy policy = meta_.policy;
    if (request.tensor_glob().empty()) {
      policy.mutable_transform()->set_rank(request.rank());
    } else {
      gift::v1::TensorOverride* target = nullptr;
      for (gift::v1::TensorOverride& o : *policy.mutable_overrides()) {
        if (o.glob() == request.tensor_glob()) target = &o;
      }
      if (target == nullptr) {
        target = policy.add_overrides();
        target->set_glob(request.tensor_glob());
      }
      target->set_rank(request.rank());
    }
    gift::v1::SetRankResponse response;
    GIFT_ASSIGN_OR_RETURN(*response.mutable_policy(), SetPolicyLocked(policy, 0));
    for (std::string& name : RequestRefreshLocked(request.tensor_glob())) {
      response.add_tensors(std::move(name));
    }
    return response;
  });
}

// ---- views ----------------------------------------------------------------

gift::v1::MacAlgorithm NegotiatedMac(gift::v1::MacAlgorithm preferred,
                                     const gift::v1::ClusterState& state) {
  constexpr gift::v1::MacAlgorithm kEveryBuild = gift::v1::MAC_ALGORITHM_AES_256_GMAC;
  for (const auto* members : {&state.workers(), &state.servers()}) {
    for (const gift::v1::Member& m : *members) {
      const bool lists = m.dataplane_macs().empty()
                             ? preferred == kEveryBuild
                             : absl::c_linear_search(m.dataplane_macs(), preferred);
      if (!lists) return kEveryBuild;
    }
  }
  return preferred;
}

gift::v1::ClusterState ClusterStateMachine::BuildStateLocked() const {
  gift::v1::ClusterState s;
  s.set_revision(meta_.revision);
  s.set_epoch(membership_.epoch());
  s.set_cluster_id(meta_.cluster_id);
  s.set_frozen_through_step(meta_.frozen_through_step);
  std::vector<const gift::v1::Member*> workers, servers;
  for (const auto& [id, m] : membership_.members()) {
    (IsWorker(m) ? workers : servers).push_back(&m);
  }
  auto by_rank = [](const gift::v1::Member* a, const gift::v1::Member* b) {
    return a->rank() < b->rank();
  };
  std::sort(workers.begin(), workers.end(), by_rank);
  std::sort(servers.begin(), servers.end(), by_rank);
  for (const gift::v1::Member* m : workers) *s.add_workers() = *m;
  for (const gift::v1::Member* m : servers) *s.add_servers() = *m;
  if (options_.dataplane_mac != gift::v1::MAC_ALGORITHM_UNSPECIFIED) {
    s.set_dataplane_mac(NegotiatedMac(options_.dataplane_mac, s));
  }
  for (const auto& [tid, t] : registry_.tensors()) *s.add_tensors() = t;
  *s.mutable_shard_map() = meta_.shard_map;
  for (const auto& [tid, b] : ledger_.bases()) *s.add_bases() = b;
  *s.mutable_policy() = meta_.policy;
  *s.mutable_run() = meta_.run;
  return s;
}

std::shared_ptr<const gift::v1::ClusterState> ClusterStateMachine::Snapshot() {
  absl::MutexLock lock(&mu_);
  if (snapshot_ == nullptr) {
    snapshot_ = std::make_shared<const gift::v1::ClusterState>(BuildStateLocked());
  }
  return snapshot_;
}

uint64_t ClusterStateMachine::revision() {
  absl::MutexLock lock(&mu_);
  return meta_.revision;
}

ClusterStateMachine::Counters ClusterStateMachine::counters() {
  absl::MutexLock lock(&mu_);
  const BasisLedger::Counters& c = ledger_.counters();
  return {.basis_commits = c.commits, .basis_postponements = c.postponements};
}

absl::StatusOr<gift::v1::StatusResponse> ClusterStateMachine::GetStatus() {
  return Run([&]() -> absl::StatusOr<gift::v1::StatusResponse> {
    gift::v1::StatusResponse response;
    *response.mutable_state() = BuildStateLocked();
    response.set_now_unix_ms(NowMsLocked());
    response.set_started_unix_ms(absl::ToUnixMillis(started_));
    uint64_t slowest = std::numeric_limits<uint64_t>::max();
    uint64_t max_step = 0, max_begun = 0;
    for (const auto& [id, m] : membership_.members()) {
      if (!IsWorker(m)) continue;
      slowest = std::min(slowest, m.last_step() + 1);
      max_step = std::max(max_step, m.last_step());
      max_begun = std::max({max_begun, m.last_step(), m.waiting_step()});
    }
    if (slowest != std::numeric_limits<uint64_t>::max()) {
      response.set_slowest_step(slowest);
      response.set_max_step(max_step);
      response.set_max_begun_step(max_begun);
      // The step waits for the workers that have not begun it; those that
      // have wait with the others.
      for (const gift::v1::Member& m : response.state().workers()) {
        if (m.last_step() + 1 == slowest && m.waiting_step() < slowest) {
          response.add_slowest_member_ids(m.member_id());
          response.add_slowest_ranks(m.rank());  // workers() is ordered by rank
        }
      }
      if (max_begun >= slowest) {
        // Some worker began or completed the slowest step: it has been
        // waiting since the first report of a step at or beyond it (or
        // since the epoch began).
        response.set_slowest_wait_ms(StepWaitedMsLocked(slowest));
      }
    }
    return response;
  });
}

}  // namespace gift::coordinator
