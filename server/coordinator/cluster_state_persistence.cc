// ClusterStateMachine's durability: loading the state from the StateStore,
// committing each call's changes, and rolling memory back to the stored state
// when a commit fails (see cluster_state.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/policy/policy.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/shard_map.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

std::string NewClusterId() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

}  // namespace

void ClusterStateMachine::ApplyStoredLocked(StoredState stored) {
  meta_ = std::move(stored.meta);
  membership_.Reset(meta_.epoch, meta_.next_member_seq, std::move(stored.members));
  registry_.Reset(std::move(stored.tensors));
  ledger_.Reset(std::move(stored.bases));
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
       {"tensors", registry_.tensors().size()}});
  return absl::OkStatus();
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
  const bool stepped = membership_.stepped();
  ApplyStoredLocked(*std::move(stored));
  // The job that stepped goes on (its reporter may be gone from the store).
  if (stepped && membership_.Count(gift::v1::MEMBER_ROLE_WORKER) > 0) membership_.NoteStepped();
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

absl::Status ClusterStateMachine::CommitLocked() {
  if (!dirty_) return absl::OkStatus();
  StoreMutation m;
  m.meta = meta_;
  m.meta.epoch = membership_.epoch();
  m.meta.next_member_seq = membership_.next_member_seq();
  membership_.AddChangesTo(&m);
  registry_.AddChangesTo(&m);
  ledger_.AddChangesTo(&m);
  GIFT_RETURN_IF_ERROR(store_->Commit(m));
  meta_.epoch = m.meta.epoch;
  meta_.next_member_seq = m.meta.next_member_seq;
  membership_.ClearChanges();
  registry_.ClearChanges();
  ledger_.ClearChanges();
  dirty_ = false;
  return absl::OkStatus();
}

}  // namespace gift::coordinator
