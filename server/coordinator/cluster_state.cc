#include "server/coordinator/cluster_state.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/base/crc32c.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/policy/policy.h"
#include "common/transform/basis_serialization.h"
#include "server/coordinator/shard_map.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

// Largest element count a tensor may have (2^48: far above any real tensor,
// far below overflow of byte counts).
constexpr uint64_t kMaxTensorElements = uint64_t{1} << 48;

class SystemClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

std::string NewClusterId() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

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

void ClusterStateMachine::ApplyStoredLocked(StoredState stored) {
  meta_ = std::move(stored.meta);
  membership_.Reset(meta_.epoch, meta_.next_member_seq, std::move(stored.members));
  tensors_.clear();
  tensor_ids_.clear();
  for (gift::v1::TensorInfo& t : stored.tensors) {
    tensor_ids_[t.name()] = t.tensor_id();
    tensors_[t.tensor_id()] = std::move(t);
  }
  ledger_.Reset(std::move(stored.bases));
  put_tensors_.clear();
}

absl::Status ClusterStateMachine::LoadLocked() {
  GIFT_ASSIGN_OR_RETURN(StoredState stored, store_->Load());
  if (stored.fresh) {
    meta_.cluster_id = NewClusterId();
    meta_.frozen_through_step = options_.step_window;
    meta_.policy = policy::WithDefaults(gift::v1::Policy());
    meta_.policy.set_version(1);
    meta_.shard_map = ComputeShardMap({}, 0, options_.chunk_bytes, 0);
    TouchLocked();
    Log(Level::kInfo, "cluster_created", {{"cluster_id", meta_.cluster_id}});
    return absl::OkStatus();
  }
  // A grace lease: live members re-heartbeat, the others expire.
  const int64_t lease = absl::ToUnixMillis(clock_->Now() + options_.lease_ttl);
  for (gift::v1::Member& m : stored.members) m.set_lease_expires_unix_ms(lease);
  ApplyStoredLocked(std::move(stored));
  for (const auto& [id, m] : membership_.members()) membership_.MarkChanged(m);
  TouchLocked();
  Log(Level::kInfo, "state_loaded",
      {{"cluster_id", meta_.cluster_id},
       {"epoch", membership_.epoch()},
       {"revision", meta_.revision},
       {"members", membership_.members().size()},
       {"tensors", tensors_.size()}});
  return absl::OkStatus();
}

template <typename Fn>
auto ClusterStateMachine::Run(Fn fn) -> decltype(fn()) {
  uint64_t before, after;
  decltype(fn()) result;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status restored = RestoreIfStaleLocked(); !restored.ok()) return restored;
    before = meta_.revision;
    ExpireLeasesLocked();
    result = fn();
    absl::Status committed = CommitLocked();
    if (!committed.ok()) {
      Log(Level::kError, "commit_failed", {{"error", committed.ToString()}});
      // Nothing of the call stays: memory goes back to the committed state.
      RollBackLocked();
      if (result.ok()) result = committed;
    }
    after = meta_.revision;
  }
  if (after != before && on_change_) on_change_();
  return result;
}

void ClusterStateMachine::RollBackLocked() {
  // Leases and reported steps are renewed in memory without a commit (they
  // make no revision), so the store's are older: the members that are still
  // members after the rollback keep their in-memory ones.
  std::map<std::string, std::pair<int64_t, uint64_t>> volatile_fields;
  for (const auto& [id, m] : membership_.members()) {
    volatile_fields[id] = {m.lease_expires_unix_ms(), m.last_step()};
  }
  dirty_ = false;
  snapshot_.reset();
  absl::StatusOr<StoredState> stored = store_->Load();
  if (!stored.ok()) {
    // Memory is ahead of the store and cannot be put back yet: every call
    // fails until a reload succeeds (RestoreIfStaleLocked).
    stale_ = true;
    Log(Level::kError, "rollback_failed", {{"error", stored.status().ToString()}});
    return;
  }
  stale_ = false;
  for (gift::v1::Member& m : stored->members) {
    auto v = volatile_fields.find(m.member_id());
    if (v == volatile_fields.end()) continue;
    m.set_lease_expires_unix_ms(v->second.first);
    m.set_last_step(std::max(m.last_step(), v->second.second));
  }
  // Uncommitted bytes go with the ledger's reset; committed ones are read
  // again on demand.
  ApplyStoredLocked(*std::move(stored));
  Log(Level::kWarning, "rolled_back",
      {{"revision", meta_.revision}, {"epoch", membership_.epoch()}});
}

absl::Status ClusterStateMachine::RestoreIfStaleLocked() {
  if (!stale_) return absl::OkStatus();
  RollBackLocked();
  if (!stale_) return absl::OkStatus();
  return absl::UnavailableError(
      "the coordinator's state file cannot be read back after a failed commit; retry later");
}

void ClusterStateMachine::TouchLocked() {
  ++meta_.revision;
  dirty_ = true;
  snapshot_.reset();
}

void ClusterStateMachine::MarkDirtyLocked() {
  dirty_ = true;
  snapshot_.reset();
}

int64_t ClusterStateMachine::NowMsLocked() const { return absl::ToUnixMillis(clock_->Now()); }

absl::Status ClusterStateMachine::CommitLocked() {
  if (!dirty_) return absl::OkStatus();
  StoreMutation m;
  m.meta = meta_;
  m.meta.epoch = membership_.epoch();
  m.meta.next_member_seq = membership_.next_member_seq();
  membership_.AddChangesTo(&m);
  for (uint64_t id : put_tensors_) {
    auto it = tensors_.find(id);
    if (it != tensors_.end()) m.put_tensors.push_back(it->second);
  }
  ledger_.AddChangesTo(&m);
  GIFT_RETURN_IF_ERROR(store_->Commit(m));
  meta_.epoch = m.meta.epoch;
  meta_.next_member_seq = m.meta.next_member_seq;
  membership_.ClearChanges();
  put_tensors_.clear();
  ledger_.ClearChanges();
  dirty_ = false;
  return absl::OkStatus();
}

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
      if (l != load.end()) l->second += tensors_[tid].num_elements();
    } else if (policy::IsTransformable(tensors_[tid].shape())) {
      orphans.push_back(tid);
    }
  }
  std::sort(orphans.begin(), orphans.end(), [&](uint64_t a, uint64_t b) {
    if (tensors_[a].num_elements() != tensors_[b].num_elements()) {
      return tensors_[a].num_elements() > tensors_[b].num_elements();
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
    if (!best.empty()) load[best] += tensors_[tid].num_elements();
  }
}

void ClusterStateMachine::OnMembershipChangedLocked() {
  epoch_started_ = clock_->Now();
  membership_.Rerank();
  AssignOwnersLocked();
  std::vector<gift::v1::TensorInfo> tensors;
  for (const auto& [tid, t] : tensors_) tensors.push_back(t);
  meta_.shard_map = ComputeShardMap(tensors, membership_.Count(gift::v1::MEMBER_ROLE_SERVER),
                                    options_.chunk_bytes, membership_.epoch());
  // Leavers no longer count towards acknowledgements.
  for (const auto& [tid, b] : ledger_.bases()) MaybeCommitLocked(ledger_.Find(tid).value());
  TouchLocked();
}

absl::StatusOr<gift::v1::JoinResponse> ClusterStateMachine::Join(
    const gift::v1::JoinRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::JoinResponse> {
    if (request.name().empty()) return absl::InvalidArgumentError("name is empty");
    if (request.role() != gift::v1::MEMBER_ROLE_WORKER &&
        request.role() != gift::v1::MEMBER_ROLE_SERVER) {
      return absl::InvalidArgumentError(
          absl::StrCat("role ", request.role(), " is not WORKER or SERVER"));
    }
    if (const gift::v1::Member* m = membership_.FindByName(request.name()); m != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat(
          "a live member named '", request.name(), "' exists (", m->member_id(),
          "); it must leave or let its lease expire before the name can join again"));
    }
    gift::v1::Member member;
    member.set_name(request.name());
    member.set_role(request.role());
    member.set_state(gift::v1::MEMBER_STATE_ACTIVE);
    member.set_data_address(request.data_address());
    member.set_control_address(request.control_address());
    member.set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    const std::string id = membership_.Add(std::move(member)).member_id();
    OnMembershipChangedLocked();
    const gift::v1::Member& joined = *membership_.Live(id).value();
    membership_.Record("join", joined, NowMsLocked());
    // A joiner starts at the cluster's progress: it must acknowledge pending
    // proposals, and until it heartbeats it does not hold up pruning.
    gift::v1::JoinResponse response;
    response.set_member_id(id);
    response.set_rank(joined.rank());
    response.set_epoch(membership_.epoch());
    response.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    *response.mutable_state() = BuildStateLocked();
    return response;
  });
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
      return absl::FailedPreconditionError(
          absl::StrCat("epoch ", request.epoch(), " is ahead of the coordinator's epoch ",
                       membership_.epoch()));
    }
    m->set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    if (request.last_step() > m->last_step()) {
      m->set_last_step(request.last_step());
      uint64_t min_next = 0, max_last = 0;
      if (IsWorker(*m) && m->last_step() > max_step_seen_) {
        max_step_seen_ = m->last_step();
        constexpr size_t kMaxTrackedSteps = 4096;
        if (step_first_seen_.size() < kMaxTrackedSteps) {
          step_first_seen_.emplace(max_step_seen_, clock_->Now());
        }
        // Keep the entries at or above the oldest incomplete step.
        membership_.WorkerSteps(&min_next, &max_last);
        step_first_seen_.erase(step_first_seen_.begin(), step_first_seen_.lower_bound(min_next));
      }
      const uint64_t revision = meta_.revision;
      if (IsWorker(*m)) {
        AdvanceFrozenLocked();
        membership_.WorkerSteps(&min_next, &max_last);
        if (ledger_.PruneAll(min_next)) TouchLocked();
      }
      if (meta_.revision != revision) membership_.MarkChanged(*m);
    }
    gift::v1::HeartbeatResponse response;
    response.set_epoch(membership_.epoch());
    response.set_revision(meta_.revision);
    response.set_lease_expires_unix_ms(m->lease_expires_unix_ms());
    response.set_state(m->state());
    return response;
  });
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

// ---- tensors --------------------------------------------------------------

absl::Status ClusterStateMachine::CheckRegistrationLocked(
    const gift::v1::RegisterTensorsRequest& request) {
  if (!request.member_id().empty()) {
    GIFT_RETURN_IF_ERROR(membership_.Live(request.member_id()).status());
  }
  std::map<std::string, const gift::v1::TensorSpec*> seen;
  for (int i = 0; i < request.tensors_size(); ++i) {
    const gift::v1::TensorSpec& spec = request.tensors(i);
    if (spec.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensors[", i, "].name is empty"));
    }
    if (spec.shape().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name(), "' has no shape"));
    }
    uint64_t elements = 1;
    for (int64_t d : spec.shape()) {
      if (d < 1 || static_cast<uint64_t>(d) > kMaxTensorElements ||
          elements * static_cast<uint64_t>(d) > kMaxTensorElements) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name(), "' shape ",
                                                       ShapeString(spec.shape()),
                                                       ": dimensions must be >= 1 and the "
                                                       "element count at most 2^48"));
      }
      elements *= static_cast<uint64_t>(d);
    }
    if (spec.dtype() == gift::v1::DTYPE_UNSPECIFIED || !gift::v1::DType_IsValid(spec.dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' dtype ", spec.dtype(), " is not valid"));
    }
    auto conflicts = [&](const google::protobuf::RepeatedField<int64_t>& shape,
                         gift::v1::DType dtype) {
      return !std::equal(shape.begin(), shape.end(), spec.shape().begin(), spec.shape().end()) ||
             dtype != spec.dtype();
    };
    auto known = tensor_ids_.find(spec.name());
    if (known != tensor_ids_.end()) {
      const gift::v1::TensorInfo& t = tensors_[known->second];
      if (conflicts(t.shape(), t.dtype())) {
        return absl::AlreadyExistsError(absl::StrCat(
            "tensor '", spec.name(), "' is registered with shape ", ShapeString(t.shape()),
            " dtype ", gift::v1::DType_Name(t.dtype()), ", not shape ", ShapeString(spec.shape()),
            " dtype ", gift::v1::DType_Name(spec.dtype())));
      }
    }
    auto [it, inserted] = seen.emplace(spec.name(), &spec);
    if (!inserted && conflicts(it->second->shape(), it->second->dtype())) {
      return absl::AlreadyExistsError(
          absl::StrCat("tensor '", spec.name(), "' appears twice with different shapes"));
    }
  }
  {
    // The policy's ranks must still make sense with the new tensors.
    std::vector<gift::v1::TensorSpec> fresh;
    for (const auto& [name, spec] : seen) {
      if (tensor_ids_.count(name) == 0) fresh.push_back(*spec);
    }
    absl::Status ranks = policy::ValidateRanksForTensors(meta_.policy, KnownShapesLocked(fresh));
    if (!ranks.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the policy does not fit these tensors: ", ranks.message(),
                       "; change it (giftctl policy set) and register again"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<gift::v1::RegisterTensorsResponse> ClusterStateMachine::RegisterTensors(
    const gift::v1::RegisterTensorsRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::RegisterTensorsResponse> {
    // Everything is checked first: a request is applied whole or not at all.
    GIFT_RETURN_IF_ERROR(CheckRegistrationLocked(request));
    std::vector<gift::v1::TensorInfo> added;
    gift::v1::RegisterTensorsResponse response;
    for (const gift::v1::TensorSpec& spec : request.tensors()) {
      auto known = tensor_ids_.find(spec.name());
      if (known == tensor_ids_.end()) {
        gift::v1::TensorInfo t;
        t.set_tensor_id(meta_.next_tensor_id++);
        t.set_name(spec.name());
        *t.mutable_shape() = spec.shape();
        t.set_dtype(spec.dtype());
        uint64_t elements = 1;
        for (int64_t d : spec.shape()) elements *= static_cast<uint64_t>(d);
        t.set_num_elements(elements);
        ledger_.AddTensor(t.tensor_id());
        put_tensors_.insert(t.tensor_id());
        known = tensor_ids_.emplace(t.name(), t.tensor_id()).first;
        added.push_back(t);
        tensors_[t.tensor_id()] = std::move(t);
      }
      *response.add_tensors() = tensors_[known->second];
    }
    if (!added.empty()) {
      AssignOwnersLocked();
      meta_.shard_map = ExtendShardMap(meta_.shard_map, added,
                                       membership_.Count(gift::v1::MEMBER_ROLE_SERVER));
      TouchLocked();
      Log(Level::kInfo, "tensors_registered",
          {{"count", added.size()}, {"total", tensors_.size()}});
    }
    *response.mutable_shard_map() = meta_.shard_map;
    return response;
  });
}

// ---- bases ----------------------------------------------------------------

void ClusterStateMachine::AdvanceFrozenLocked() {
  uint64_t min_next = 0, max_step = 0;
  if (!membership_.WorkerSteps(&min_next, &max_step)) return;
  const uint64_t frozen = max_step + options_.step_window;
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
  const gift::v1::TensorInfo& tensor = tensors_[header.tensor_id()];
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
    const gift::v1::TensorInfo& tensor = tensors_[header.tensor_id()];
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

std::vector<policy::NamedShape> ClusterStateMachine::KnownShapesLocked(
    const std::vector<gift::v1::TensorSpec>& extra) const {
  std::vector<policy::NamedShape> shapes;
  for (const auto& [tid, t] : tensors_) shapes.push_back({t.name(), t.shape()});
  for (const gift::v1::TensorSpec& spec : extra) shapes.push_back({spec.name(), spec.shape()});
  return shapes;
}

gift::v1::Policy ClusterStateMachine::GetPolicy() {
  absl::MutexLock lock(&mu_);
  return meta_.policy;
}

absl::StatusOr<gift::v1::Policy> ClusterStateMachine::SetPolicyLocked(const gift::v1::Policy& policy,
                                                               uint64_t expected_version) {
  if (expected_version != 0 && expected_version != meta_.policy.version()) {
    return absl::AbortedError(absl::StrCat("the policy is at version ", meta_.policy.version(),
                                           ", not the expected version ", expected_version,
                                           "; read it again and retry"));
  }
  gift::v1::Policy next = policy::WithDefaults(policy);
  GIFT_RETURN_IF_ERROR(policy::Validate(next));
  GIFT_RETURN_IF_ERROR(policy::ValidateRanksForTensors(next, KnownShapesLocked({})));
  next.set_version(meta_.policy.version() + 1);
  meta_.policy = std::move(next);
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
    const gift::v1::TensorInfo& t = tensors_[tid];
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
  for (const auto& [tid, t] : tensors_) *s.add_tensors() = t;
  *s.mutable_shard_map() = meta_.shard_map;
  for (const auto& [tid, b] : ledger_.bases()) *s.add_bases() = b;
  *s.mutable_policy() = meta_.policy;
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
    uint64_t max_step = 0;
    for (const auto& [id, m] : membership_.members()) {
      if (!IsWorker(m)) continue;
      slowest = std::min(slowest, m.last_step() + 1);
      max_step = std::max(max_step, m.last_step());
    }
    if (slowest != std::numeric_limits<uint64_t>::max()) {
      response.set_slowest_step(slowest);
      response.set_max_step(max_step);
      for (const gift::v1::Member& m : response.state().workers()) {
        if (m.last_step() + 1 == slowest) {
          response.add_slowest_member_ids(m.member_id());
          response.add_slowest_ranks(m.rank());  // workers() is ordered by rank
        }
      }
      if (max_step >= slowest) {
        // Some worker is past the slowest step: it has been waiting since the
        // first report of a step at or beyond it (or since the epoch began).
        absl::Time since = std::max(epoch_started_, started_);
        auto first = step_first_seen_.lower_bound(slowest);
        if (first != step_first_seen_.end()) since = std::max(since, first->second);
        response.set_slowest_wait_ms(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(clock_->Now() - since)));
      }
    }
    return response;
  });
}

}  // namespace gift::coordinator
