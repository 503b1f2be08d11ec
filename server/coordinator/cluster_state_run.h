// ClusterStateMachine::Run, shared by the .cc files that implement the state
// machine's calls (cluster_state.cc, cluster_state_failures.cc,
// cluster_state_join.cc, cluster_state_registration.cc,
// cluster_state_training_run.cc): runs a call
// under the lock after expiring leases, commits its changes (rolling memory
// back when the commit fails) and runs the change callback outside the lock
// when the revision moved. Internal to server/coordinator: include it only
// from the state machine's own .cc files.
#ifndef GIFT_SERVER_COORDINATOR_CLUSTER_STATE_RUN_H_
#define GIFT_SERVER_COORDINATOR_CLUSTER_STATE_RUN_H_

#include "common/base/logging.h"
#include "server/coordinator/cluster_state.h"

namespace gift::coordinator {

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
      gift::logging::Log(gift::logging::Level::kError, "commit_failed",
                         {{"error", committed.ToString()}});
      // Nothing of the call stays: memory goes back to the committed state.
      RollBackLocked();
      if (result.ok()) result = committed;
    }
    after = meta_.revision;
  }
  if (after != before && on_change_) on_change_();
  return result;
}

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_CLUSTER_STATE_RUN_H_
