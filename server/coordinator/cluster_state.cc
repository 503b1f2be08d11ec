#include "server/coordinator/cluster_state.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
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

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
constexpr char kMemberIdPrefix[] = "m";
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

absl::string_view RoleName(gift::v1::MemberRole role) {
  switch (role) {
    case gift::v1::MEMBER_ROLE_WORKER:
      return "worker";
    case gift::v1::MEMBER_ROLE_SERVER:
      return "server";
    default:
      return "unspecified";
  }
}

bool IsWorker(const gift::v1::Member& m) { return m.role() == gift::v1::MEMBER_ROLE_WORKER; }

}  // namespace

Clock* RealClock() {
  static Clock* clock = new SystemClock();
  return clock;
}

absl::StatusOr<std::unique_ptr<ClusterState>> ClusterState::Create(
    const ClusterOptions& options, std::unique_ptr<StateStore> store, Clock* clock) {
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease TTL must be positive");
  }
  std::unique_ptr<ClusterState> state(new ClusterState(options, std::move(store), clock));
  absl::MutexLock lock(&state->mu_);
  GIFT_RETURN_IF_ERROR(state->LoadLocked());
  GIFT_RETURN_IF_ERROR(state->CommitLocked());
  return state;
}

void ClusterState::SetChangeCallback(std::function<void()> callback) {
  on_change_ = std::move(callback);
}

absl::Status ClusterState::LoadLocked() {
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
  meta_ = std::move(stored.meta);
  const int64_t lease = absl::ToUnixMillis(clock_->Now() + options_.lease_ttl);
  for (gift::v1::Member& m : stored.members) {
    // A grace lease: live members re-heartbeat, the others expire.
    m.set_lease_expires_unix_ms(lease);
    pending_.put_members[m.member_id()] = m;
    members_[m.member_id()] = std::move(m);
  }
  for (gift::v1::TensorInfo& t : stored.tensors) {
    tensor_ids_[t.name()] = t.tensor_id();
    tensors_[t.tensor_id()] = std::move(t);
  }
  for (gift::v1::TensorBasisState& b : stored.bases) bases_[b.tensor_id()] = std::move(b);
  TouchLocked();
  Log(Level::kInfo, "state_loaded",
      {{"cluster_id", meta_.cluster_id},
       {"epoch", meta_.epoch},
       {"revision", meta_.revision},
       {"members", members_.size()},
       {"tensors", tensors_.size()}});
  return absl::OkStatus();
}

template <typename Fn>
auto ClusterState::Run(Fn fn) -> decltype(fn()) {
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

void ClusterState::RollBackLocked() {
  // Leases and reported steps are renewed in memory without a commit (they
  // make no revision), so the store's are older: the members that are still
  // members after the rollback keep their in-memory ones.
  std::map<std::string, std::pair<int64_t, uint64_t>> volatile_fields;
  for (const auto& [id, m] : members_) {
    volatile_fields[id] = {m.lease_expires_unix_ms(), m.last_step()};
  }
  pending_ = Pending();
  dirty_ = false;
  snapshot_.reset();
  bytes_.clear();  // uncommitted bytes go; committed ones are read again on demand
  absl::StatusOr<StoredState> stored = store_->Load();
  if (!stored.ok()) {
    // Memory is ahead of the store and cannot be put back yet: every call
    // fails until a reload succeeds (RestoreIfStaleLocked).
    stale_ = true;
    Log(Level::kError, "rollback_failed", {{"error", stored.status().ToString()}});
    return;
  }
  stale_ = false;
  meta_ = std::move(stored->meta);
  members_.clear();
  for (gift::v1::Member& m : stored->members) {
    auto v = volatile_fields.find(m.member_id());
    if (v != volatile_fields.end()) {
      m.set_lease_expires_unix_ms(v->second.first);
      m.set_last_step(std::max(m.last_step(), v->second.second));
    }
    members_[m.member_id()] = std::move(m);
  }
  tensors_.clear();
  tensor_ids_.clear();
  for (gift::v1::TensorInfo& t : stored->tensors) {
    tensor_ids_[t.name()] = t.tensor_id();
    tensors_[t.tensor_id()] = std::move(t);
  }
  bases_.clear();
  for (gift::v1::TensorBasisState& b : stored->bases) bases_[b.tensor_id()] = std::move(b);
  Log(Level::kWarning, "rolled_back", {{"revision", meta_.revision}, {"epoch", meta_.epoch}});
}

absl::Status ClusterState::RestoreIfStaleLocked() {
  if (!stale_) return absl::OkStatus();
  RollBackLocked();
  if (!stale_) return absl::OkStatus();
  return absl::UnavailableError(
      "the coordinator's state file cannot be read back after a failed commit; retry later");
}

void ClusterState::TouchLocked() {
  ++meta_.revision;
  dirty_ = true;
  snapshot_.reset();
}

void ClusterState::MarkDirtyLocked() {
  dirty_ = true;
  snapshot_.reset();
}

int64_t ClusterState::NowMsLocked() const { return absl::ToUnixMillis(clock_->Now()); }

absl::Status ClusterState::CommitLocked() {
  if (!dirty_) return absl::OkStatus();
  StoreMutation m;
  m.meta = meta_;
  for (auto& [id, member] : pending_.put_members) m.put_members.push_back(member);
  m.delete_members.assign(pending_.delete_members.begin(), pending_.delete_members.end());
  for (uint64_t id : pending_.put_tensors) {
    auto it = tensors_.find(id);
    if (it != tensors_.end()) m.put_tensors.push_back(it->second);
  }
  for (uint64_t id : pending_.put_bases) {
    auto it = bases_.find(id);
    if (it != bases_.end()) m.put_bases.push_back(it->second);
  }
  for (auto& [key, bytes] : pending_.put_bytes) {
    m.put_basis_bytes.push_back({key.first, key.second, bytes});
  }
  m.delete_basis_bytes.assign(pending_.delete_bytes.begin(), pending_.delete_bytes.end());
  m.history = pending_.history;
  GIFT_RETURN_IF_ERROR(store_->Commit(m));
  pending_ = Pending();
  dirty_ = false;
  return absl::OkStatus();
}

absl::StatusOr<gift::v1::Member*> ClusterState::LiveMemberLocked(const std::string& member_id) {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id is empty");
  auto it = members_.find(member_id);
  if (it != members_.end()) return &it->second;
  uint64_t seq = 0;
  absl::string_view id = member_id;
  if (absl::ConsumePrefix(&id, kMemberIdPrefix) && absl::SimpleAtoi(id, &seq) && seq >= 1 &&
      seq < meta_.next_member_seq) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", member_id, " is no longer a member (it left or its lease expired); join again"));
  }
  return absl::NotFoundError(absl::StrCat("unknown member '", member_id, "'"));
}

absl::StatusOr<gift::v1::Member*> ClusterState::LiveWorkerLocked(const std::string& member_id) {
  GIFT_ASSIGN_OR_RETURN(gift::v1::Member * m, LiveMemberLocked(member_id));
  if (!IsWorker(*m)) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_id, " is a ", RoleName(m->role()), ", not a worker"));
  }
  return m;
}

absl::StatusOr<gift::v1::TensorBasisState*> ClusterState::BasisLocked(uint64_t tensor_id) {
  auto it = bases_.find(tensor_id);
  if (it == bases_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown tensor id ", tensor_id));
  }
  return &it->second;
}

void ClusterState::RecordLocked(absl::string_view event, const gift::v1::Member& member) {
  MembershipEvent& e = pending_.history.emplace_back();
  e.time_unix_ms = NowMsLocked();
  e.epoch = meta_.epoch;
  e.event = std::string(event);
  e.member_id = member.member_id();
  e.name = member.name();
  e.role = member.role();
  e.rank = member.rank();
  Log(Level::kInfo, absl::StrCat("member_", event),
      {{"member_id", member.member_id()},
       {"name", member.name()},
       {"role", RoleName(member.role())},
       {"rank", member.rank()},
       {"epoch", meta_.epoch}});
}

// ---- membership -----------------------------------------------------------

void ClusterState::ExpireLeasesLocked() {
  const int64_t now = NowMsLocked();
  std::vector<std::string> expired;
  for (const auto& [id, m] : members_) {
    if (m.lease_expires_unix_ms() <= now) expired.push_back(id);
  }
  if (expired.empty()) return;
  for (const std::string& id : expired) RemoveMemberLocked(id, "expire");
  OnMembershipChangedLocked();
}

absl::Status ClusterState::ExpireLeases() {
  return Run([] { return absl::OkStatus(); });
}

void ClusterState::RemoveMemberLocked(const std::string& member_id, absl::string_view event) {
  auto it = members_.find(member_id);
  if (it == members_.end()) return;
  ++meta_.epoch;
  RecordLocked(event, it->second);
  pending_.put_members.erase(member_id);
  pending_.delete_members.insert(member_id);
  members_.erase(it);
}

uint32_t ClusterState::CountLocked(gift::v1::MemberRole role) const {
  uint32_t n = 0;
  for (const auto& [id, m] : members_) n += m.role() == role ? 1 : 0;
  return n;
}

void ClusterState::RerankLocked(gift::v1::MemberRole role) {
  std::vector<gift::v1::Member*> ms;
  for (auto& [id, m] : members_) {
    if (m.role() == role) ms.push_back(&m);
  }
  // Rank order, then join order (earlier epoch, then id), for determinism.
  std::sort(ms.begin(), ms.end(), [](const gift::v1::Member* a, const gift::v1::Member* b) {
    return std::make_tuple(a->rank(), a->joined_epoch(), a->member_id()) <
           std::make_tuple(b->rank(), b->joined_epoch(), b->member_id());
  });
  const uint32_t count = static_cast<uint32_t>(ms.size());
  std::vector<bool> taken(count, false);
  std::vector<gift::v1::Member*> unranked;
  for (gift::v1::Member* m : ms) {
    if (m->rank() < count && !taken[m->rank()]) {
      taken[m->rank()] = true;
    } else {
      unranked.push_back(m);
    }
  }
  size_t next = 0;
  for (uint32_t r = 0; r < count; ++r) {
    if (taken[r]) continue;
    unranked[next++]->set_rank(r);
  }
}

void ClusterState::AssignOwnersLocked() {
  std::map<std::string, uint64_t> load;  // owned elements per eligible worker
  for (const auto& [id, m] : members_) {
    if (IsWorker(m) && m.state() != gift::v1::MEMBER_STATE_DRAINING) load[id] = 0;
  }
  if (load.empty()) {  // only draining workers (or none): they still may own
    for (const auto& [id, m] : members_) {
      if (IsWorker(m)) load[id] = 0;
    }
  }
  std::vector<uint64_t> orphans;
  for (auto& [tid, basis] : bases_) {
    auto owner = members_.find(basis.owner_member_id());
    if (owner != members_.end() && IsWorker(owner->second)) {
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
    gift::v1::TensorBasisState& basis = bases_[tid];
    std::string best;
    for (const auto& [id, l] : load) {
      if (best.empty() || std::make_pair(l, members_[id].rank()) <
                              std::make_pair(load[best], members_[best].rank())) {
        best = id;
      }
    }
    if (basis.owner_member_id() == best) continue;
    basis.set_owner_member_id(best);
    pending_.put_bases.insert(tid);
    if (!best.empty()) load[best] += tensors_[tid].num_elements();
  }
}

void ClusterState::OnMembershipChangedLocked() {
  epoch_started_ = clock_->Now();
  RerankLocked(gift::v1::MEMBER_ROLE_WORKER);
  RerankLocked(gift::v1::MEMBER_ROLE_SERVER);
  for (const auto& [id, m] : members_) pending_.put_members[id] = m;
  AssignOwnersLocked();
  std::vector<gift::v1::TensorInfo> tensors;
  for (const auto& [tid, t] : tensors_) tensors.push_back(t);
  meta_.shard_map = ComputeShardMap(tensors, CountLocked(gift::v1::MEMBER_ROLE_SERVER),
                                    options_.chunk_bytes, meta_.epoch);
  // Leavers no longer count towards acknowledgements.
  for (auto& [tid, basis] : bases_) MaybeCommitLocked(&basis);
  TouchLocked();
}

absl::StatusOr<gift::v1::JoinResponse> ClusterState::Join(const gift::v1::JoinRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::JoinResponse> {
    if (request.name().empty()) return absl::InvalidArgumentError("name is empty");
    if (request.role() != gift::v1::MEMBER_ROLE_WORKER &&
        request.role() != gift::v1::MEMBER_ROLE_SERVER) {
      return absl::InvalidArgumentError(
          absl::StrCat("role ", request.role(), " is not WORKER or SERVER"));
    }
    for (const auto& [id, m] : members_) {
      if (m.name() == request.name()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "a live member named '", request.name(), "' exists (", id,
            "); it must leave or let its lease expire before the name can join again"));
      }
    }
    gift::v1::Member member;
    member.set_member_id(absl::StrCat(kMemberIdPrefix, meta_.next_member_seq++));
    member.set_name(request.name());
    member.set_role(request.role());
    member.set_rank(kNoRank);
    member.set_state(gift::v1::MEMBER_STATE_ACTIVE);
    member.set_data_address(request.data_address());
    member.set_control_address(request.control_address());
    member.set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    ++meta_.epoch;
    member.set_joined_epoch(meta_.epoch);
    const std::string id = member.member_id();
    members_[id] = std::move(member);
    OnMembershipChangedLocked();
    const gift::v1::Member& joined = members_[id];
    RecordLocked("join", joined);
    // A joiner starts at the cluster's progress: it must acknowledge pending
    // proposals, and until it heartbeats it does not hold up pruning.
    gift::v1::JoinResponse response;
    response.set_member_id(id);
    response.set_rank(joined.rank());
    response.set_epoch(meta_.epoch);
    response.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    *response.mutable_state() = BuildStateLocked();
    return response;
  });
}

absl::StatusOr<gift::v1::LeaveResponse> ClusterState::Leave(const gift::v1::LeaveRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::LeaveResponse> {
    GIFT_RETURN_IF_ERROR(LiveMemberLocked(request.member_id()).status());
    RemoveMemberLocked(request.member_id(), "leave");
    OnMembershipChangedLocked();
    gift::v1::LeaveResponse response;
    response.set_epoch(meta_.epoch);
    return response;
  });
}

absl::StatusOr<gift::v1::HeartbeatResponse> ClusterState::Heartbeat(
    const gift::v1::HeartbeatRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::HeartbeatResponse> {
    GIFT_ASSIGN_OR_RETURN(gift::v1::Member * m, LiveMemberLocked(request.member_id()));
    if (request.epoch() > meta_.epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch ", request.epoch(), " is ahead of the coordinator's epoch ", meta_.epoch));
    }
    m->set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    if (request.last_step() > m->last_step()) {
      m->set_last_step(request.last_step());
      if (IsWorker(*m) && m->last_step() > max_step_seen_) {
        max_step_seen_ = m->last_step();
        constexpr size_t kMaxTrackedSteps = 4096;
        if (step_first_seen_.size() < kMaxTrackedSteps) {
          step_first_seen_.emplace(max_step_seen_, clock_->Now());
        }
        uint64_t min_step = max_step_seen_;
        for (const auto& [id, w] : members_) {
          if (IsWorker(w)) min_step = std::min(min_step, w.last_step());
        }
        // Keep the entries at or above the oldest incomplete step (min + 1).
        step_first_seen_.erase(step_first_seen_.begin(),
                               step_first_seen_.lower_bound(min_step + 1));
      }
      const uint64_t revision = meta_.revision;
      if (IsWorker(*m)) {
        AdvanceFrozenLocked();
        for (auto& [tid, basis] : bases_) PruneLocked(&basis);
      }
      if (meta_.revision != revision) pending_.put_members[m->member_id()] = *m;
    }
    gift::v1::HeartbeatResponse response;
    response.set_epoch(meta_.epoch);
    response.set_revision(meta_.revision);
    response.set_lease_expires_unix_ms(m->lease_expires_unix_ms());
    response.set_state(m->state());
    return response;
  });
}

absl::StatusOr<gift::v1::DrainResponse> ClusterState::Drain(const gift::v1::DrainRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::DrainResponse> {
    gift::v1::Member* member = nullptr;
    if (!request.member_id().empty()) {
      GIFT_ASSIGN_OR_RETURN(member, LiveMemberLocked(request.member_id()));
    } else if (!request.name().empty()) {
      for (auto& [id, m] : members_) {
        if (m.name() == request.name()) member = &m;
      }
      if (member == nullptr) {
        return absl::NotFoundError(absl::StrCat("no live member named '", request.name(), "'"));
      }
    } else {
      return absl::InvalidArgumentError("give member_id or name");
    }
    if (member->state() != gift::v1::MEMBER_STATE_DRAINING) {
      member->set_state(gift::v1::MEMBER_STATE_DRAINING);
      pending_.put_members[member->member_id()] = *member;
      RecordLocked("drain", *member);
      TouchLocked();
    }
    gift::v1::DrainResponse response;
    *response.mutable_member() = *member;
    return response;
  });
}

// ---- tensors --------------------------------------------------------------

absl::StatusOr<gift::v1::RegisterTensorsResponse> ClusterState::RegisterTensors(
    const gift::v1::RegisterTensorsRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::RegisterTensorsResponse> {
    if (!request.member_id().empty()) {
      GIFT_RETURN_IF_ERROR(LiveMemberLocked(request.member_id()).status());
    }
    // Validate everything first: a request is applied whole or not at all.
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
        gift::v1::TensorBasisState& basis = bases_[t.tensor_id()];
        basis.set_tensor_id(t.tensor_id());
        gift::v1::BasisVersion& v0 = *basis.add_versions();
        v0.set_version(0);
        v0.set_activation_step(0);
        v0.set_direct(true);
        pending_.put_tensors.insert(t.tensor_id());
        pending_.put_bases.insert(t.tensor_id());
        known = tensor_ids_.emplace(t.name(), t.tensor_id()).first;
        added.push_back(t);
        tensors_[t.tensor_id()] = std::move(t);
      }
      *response.add_tensors() = tensors_[known->second];
    }
    if (!added.empty()) {
      AssignOwnersLocked();
      meta_.shard_map =
          ExtendShardMap(meta_.shard_map, added, CountLocked(gift::v1::MEMBER_ROLE_SERVER));
      TouchLocked();
      Log(Level::kInfo, "tensors_registered",
          {{"count", added.size()}, {"total", tensors_.size()}});
    }
    *response.mutable_shard_map() = meta_.shard_map;
    return response;
  });
}

// ---- bases ----------------------------------------------------------------

void ClusterState::AdvanceFrozenLocked() {
  uint64_t max_step = 0;
  bool any = false;
  for (const auto& [id, m] : members_) {
    if (!IsWorker(m)) continue;
    max_step = std::max(max_step, m.last_step());
    any = true;
  }
  if (!any) return;
  const uint64_t frozen = max_step + options_.step_window;
  if (frozen <= meta_.frozen_through_step) return;
  const uint64_t lead = meta_.policy.refresh().activation_lead_steps();
  for (auto& [tid, basis] : bases_) {
    if (!basis.has_proposal()) continue;
    gift::v1::BasisProposal& p = *basis.mutable_proposal();
    if (p.tentative_activation_step() <= frozen) {
      p.set_tentative_activation_step(frozen + lead);
      p.set_postponements(p.postponements() + 1);
      ++counters_.basis_postponements;
      pending_.put_bases.insert(tid);
      Log(Level::kInfo, "basis_postponed",
          {{"tensor_id", tid},
           {"version", p.version()},
           {"activation_step", p.tentative_activation_step()},
           {"acks", p.acked_member_ids_size()}});
    }
  }
  meta_.frozen_through_step = frozen;
  TouchLocked();
}

void ClusterState::MaybeCommitLocked(gift::v1::TensorBasisState* basis) {
  if (!basis->has_proposal()) return;
  const gift::v1::BasisProposal& p = basis->proposal();
  std::set<std::string> acked(p.acked_member_ids().begin(), p.acked_member_ids().end());
  for (const auto& [id, m] : members_) {
    if (IsWorker(m) && acked.count(id) == 0) return;
  }
  // Invariant: a pending tentative step is above frozen_through_step.
  gift::v1::BasisVersion& v = *basis->add_versions();
  v.set_version(p.version());
  v.set_activation_step(p.tentative_activation_step());
  v.set_rank(p.rank());
  v.set_size_bytes(p.size_bytes());
  v.set_crc32c(p.crc32c());
  v.set_direct(p.direct());
  Log(Level::kInfo, "basis_committed",
      {{"tensor_id", basis->tensor_id()},
       {"version", v.version()},
       {"activation_step", v.activation_step()},
       {"postponements", p.postponements()}});
  basis->clear_proposal();
  ++counters_.basis_commits;
  pending_.put_bases.insert(basis->tensor_id());
  PruneLocked(basis);
  TouchLocked();
}

void ClusterState::PruneLocked(gift::v1::TensorBasisState* basis) {
  uint64_t min_next_step = std::numeric_limits<uint64_t>::max();
  for (const auto& [id, m] : members_) {
    if (IsWorker(m)) min_next_step = std::min(min_next_step, m.last_step() + 1);
  }
  if (min_next_step == std::numeric_limits<uint64_t>::max()) return;  // no workers
  auto* versions = basis->mutable_versions();
  int drop = 0;
  while (drop + 1 < versions->size() && (*versions)[drop + 1].activation_step() <= min_next_step) {
    ++drop;
  }
  if (drop == 0) return;
  for (int i = 0; i < drop; ++i) DropBytesLocked(basis->tensor_id(), (*versions)[i].version());
  versions->erase(versions->begin(), versions->begin() + drop);
  pending_.put_bases.insert(basis->tensor_id());
  TouchLocked();
}

void ClusterState::DropBytesLocked(uint64_t tensor_id, uint64_t version) {
  const auto key = std::make_pair(tensor_id, version);
  bytes_.erase(key);
  pending_.put_bytes.erase(key);
  pending_.delete_bytes.insert(key);
}

absl::Status ClusterState::CheckPublishLocked(const gift::v1::BasisHeader& header) {
  GIFT_RETURN_IF_ERROR(LiveWorkerLocked(header.member_id()).status());
  GIFT_ASSIGN_OR_RETURN(gift::v1::TensorBasisState * basis, BasisLocked(header.tensor_id()));
  const gift::v1::TensorInfo& tensor = tensors_[header.tensor_id()];
  if (basis->owner_member_id() != header.member_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", header.member_id(), " does not own tensor '", tensor.name(),
                     "' (id ", tensor.tensor_id(), "); its owner is ",
                     basis->owner_member_id().empty() ? "nobody" : basis->owner_member_id()));
  }
  uint64_t last = 0;
  for (const gift::v1::BasisVersion& v : basis->versions()) last = std::max(last, v.version());
  if (basis->has_proposal()) last = std::max(last, basis->proposal().version());
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

absl::Status ClusterState::CheckPublish(const gift::v1::BasisHeader& header) {
  return Run([&] { return CheckPublishLocked(header); });
}

absl::StatusOr<gift::v1::PublishBasisResponse> ClusterState::PublishBasis(
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
    gift::v1::TensorBasisState& basis = bases_[header.tensor_id()];
    if (basis.has_proposal()) {
      // The newest version wins: the pending one is dropped with its bytes.
      Log(Level::kInfo, "basis_superseded",
          {{"tensor_id", header.tensor_id()},
           {"version", basis.proposal().version()},
           {"by", header.version()}});
      DropBytesLocked(header.tensor_id(), basis.proposal().version());
    }
    gift::v1::BasisProposal& p = *basis.mutable_proposal();
    p.Clear();
    p.set_version(header.version());
    p.set_tentative_activation_step(meta_.frozen_through_step +
                                    meta_.policy.refresh().activation_lead_steps());
    p.set_state(gift::v1::BASIS_PROPOSAL_STATE_WAITING_FOR_ACKS);
    p.add_acked_member_ids(header.member_id());  // the publisher has the bytes
    p.set_rank(header.rank());
    p.set_size_bytes(header.size_bytes());
    p.set_crc32c(header.crc32c());
    p.set_direct(header.direct());
    const uint64_t tentative = p.tentative_activation_step();
    if (!header.direct()) {
      const auto key = std::make_pair(header.tensor_id(), header.version());
      bytes_[key] = shared;
      pending_.delete_bytes.erase(key);
      pending_.put_bytes[key] = shared;
    }
    pending_.put_bases.insert(header.tensor_id());
    Log(Level::kInfo, "basis_published",
        {{"tensor_id", header.tensor_id()},
         {"version", header.version()},
         {"size_bytes", header.size_bytes()},
         {"activation_step", tentative}});
    TouchLocked();
    MaybeCommitLocked(&basis);
    gift::v1::PublishBasisResponse response;
    response.set_tentative_activation_step(tentative);
    return response;
  });
}

absl::StatusOr<ClusterState::BasisData> ClusterState::FetchBasis(
    const gift::v1::FetchBasisRequest& request) {
  BasisData data;
  bool need_load = false;
  absl::Status status = Run([&]() -> absl::Status {
    GIFT_RETURN_IF_ERROR(LiveMemberLocked(request.member_id()).status());
    GIFT_ASSIGN_OR_RETURN(gift::v1::TensorBasisState * basis, BasisLocked(request.tensor_id()));
    gift::v1::BasisHeader& h = data.header;
    h.set_member_id(basis->owner_member_id());
    h.set_tensor_id(request.tensor_id());
    h.set_version(request.version());
    bool found = false;
    if (basis->has_proposal() && basis->proposal().version() == request.version()) {
      const gift::v1::BasisProposal& p = basis->proposal();
      h.set_rank(p.rank());
      h.set_direct(p.direct());
      h.set_size_bytes(p.size_bytes());
      h.set_crc32c(p.crc32c());
      found = true;
    }
    for (const gift::v1::BasisVersion& v : basis->versions()) {
      if (v.version() != request.version()) continue;
      h.set_rank(v.rank());
      h.set_direct(v.direct());
      h.set_size_bytes(v.size_bytes());
      h.set_crc32c(v.crc32c());
      found = true;
    }
    if (!found) {
      return absl::NotFoundError(absl::StrCat("tensor ", request.tensor_id(),
                                              " has no basis version ", request.version()));
    }
    if (h.direct()) return absl::OkStatus();
    auto it = bytes_.find({request.tensor_id(), request.version()});
    if (it != bytes_.end()) {
      data.bytes = it->second;
    } else {
      need_load = true;
    }
    return absl::OkStatus();
  });
  GIFT_RETURN_IF_ERROR(status);
  if (need_load) {
    // After a restart: read from the file without holding the lock.
    GIFT_ASSIGN_OR_RETURN(std::string bytes,
                          store_->LoadBasisBytes(request.tensor_id(), request.version()));
    data.bytes = std::make_shared<const std::string>(std::move(bytes));
    absl::MutexLock lock(&mu_);
    bytes_.emplace(std::make_pair(request.tensor_id(), request.version()), data.bytes);
  }
  return data;
}

absl::StatusOr<gift::v1::AckBasisResponse> ClusterState::AckBasis(
    const gift::v1::AckBasisRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::AckBasisResponse> {
    GIFT_RETURN_IF_ERROR(LiveWorkerLocked(request.member_id()).status());
    GIFT_ASSIGN_OR_RETURN(gift::v1::TensorBasisState * basis, BasisLocked(request.tensor_id()));
    gift::v1::AckBasisResponse response;
    if (basis->has_proposal() && basis->proposal().version() == request.version()) {
      gift::v1::BasisProposal& p = *basis->mutable_proposal();
      const auto& acked = p.acked_member_ids();
      if (std::find(acked.begin(), acked.end(), request.member_id()) == acked.end()) {
        p.add_acked_member_ids(request.member_id());
        pending_.put_bases.insert(request.tensor_id());
        // Only the commit (MaybeCommitLocked) is news for watchers: bumping
        // the revision on every acknowledgement sent each watcher a full
        // snapshot per ack, P^2 snapshots per refresh.
        MarkDirtyLocked();
        MaybeCommitLocked(basis);
      }
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

std::vector<policy::NamedShape> ClusterState::KnownShapesLocked(
    const std::vector<gift::v1::TensorSpec>& extra) const {
  std::vector<policy::NamedShape> shapes;
  for (const auto& [tid, t] : tensors_) shapes.push_back({t.name(), t.shape()});
  for (const gift::v1::TensorSpec& spec : extra) shapes.push_back({spec.name(), spec.shape()});
  return shapes;
}

gift::v1::Policy ClusterState::GetPolicy() {
  absl::MutexLock lock(&mu_);
  return meta_.policy;
}

absl::StatusOr<gift::v1::Policy> ClusterState::SetPolicyLocked(const gift::v1::Policy& policy,
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

absl::StatusOr<gift::v1::Policy> ClusterState::SetPolicy(
    const gift::v1::SetPolicyRequest& request) {
  return Run([&] { return SetPolicyLocked(request.policy(), request.expected_version()); });
}

std::vector<std::string> ClusterState::RequestRefreshLocked(const std::string& glob) {
  std::vector<std::string> names;
  for (auto& [tid, basis] : bases_) {
    const gift::v1::TensorInfo& t = tensors_[tid];
    if (!policy::IsTransformable(t.shape())) continue;
    if (!glob.empty() && !policy::GlobMatch(glob, t.name())) continue;
    basis.set_refresh_requests(basis.refresh_requests() + 1);
    pending_.put_bases.insert(tid);
    names.push_back(t.name());
  }
  if (!names.empty()) {
    TouchLocked();
    Log(Level::kInfo, "refresh_requested",
        {{"glob", glob.empty() ? "*" : glob}, {"tensors", names.size()}});
  }
  return names;
}

absl::StatusOr<gift::v1::RequestRefreshResponse> ClusterState::RequestRefresh(
    const gift::v1::RequestRefreshRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::RequestRefreshResponse> {
    gift::v1::RequestRefreshResponse response;
    for (std::string& name : RequestRefreshLocked(request.tensor_glob())) {
      response.add_tensors(std::move(name));
    }
    return response;
  });
}

absl::StatusOr<gift::v1::SetRankResponse> ClusterState::SetRank(
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

gift::v1::ClusterState ClusterState::BuildStateLocked() const {
  gift::v1::ClusterState s;
  s.set_revision(meta_.revision);
  s.set_epoch(meta_.epoch);
  s.set_cluster_id(meta_.cluster_id);
  s.set_frozen_through_step(meta_.frozen_through_step);
  std::vector<const gift::v1::Member*> workers, servers;
  for (const auto& [id, m] : members_) (IsWorker(m) ? workers : servers).push_back(&m);
  auto by_rank = [](const gift::v1::Member* a, const gift::v1::Member* b) {
    return a->rank() < b->rank();
  };
  std::sort(workers.begin(), workers.end(), by_rank);
  std::sort(servers.begin(), servers.end(), by_rank);
  for (const gift::v1::Member* m : workers) *s.add_workers() = *m;
  for (const gift::v1::Member* m : servers) *s.add_servers() = *m;
  for (const auto& [tid, t] : tensors_) *s.add_tensors() = t;
  *s.mutable_shard_map() = meta_.shard_map;
  for (const auto& [tid, b] : bases_) *s.add_bases() = b;
  *s.mutable_policy() = meta_.policy;
  return s;
}

std::shared_ptr<const gift::v1::ClusterState> ClusterState::Snapshot() {
  absl::MutexLock lock(&mu_);
  if (snapshot_ == nullptr) {
    snapshot_ = std::make_shared<const gift::v1::ClusterState>(BuildStateLocked());
  }
  return snapshot_;
}

uint64_t ClusterState::revision() {
  absl::MutexLock lock(&mu_);
  return meta_.revision;
}

ClusterState::Counters ClusterState::counters() {
  absl::MutexLock lock(&mu_);
  return counters_;
}

absl::StatusOr<gift::v1::StatusResponse> ClusterState::GetStatus() {
  return Run([&]() -> absl::StatusOr<gift::v1::StatusResponse> {
    gift::v1::StatusResponse response;
    *response.mutable_state() = BuildStateLocked();
    response.set_now_unix_ms(NowMsLocked());
    response.set_started_unix_ms(absl::ToUnixMillis(started_));
    uint64_t slowest = std::numeric_limits<uint64_t>::max();
    uint64_t max_step = 0;
    for (const auto& [id, m] : members_) {
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
