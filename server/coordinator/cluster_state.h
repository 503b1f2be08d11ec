// The coordinator's state machine: membership with leases and epochs, dense
// ranks, the tensor registry and shard map, basis owners, the versioned basis
// refresh negotiation, and the policy. No gRPC here: the service
// (coordinator_service.h) translates RPCs into these calls.
//
// Structure: ClusterStateMachine holds the lock, the meta record (frozen
// horizon, policy, shard map, revision, tensor id counter) and the commit to
// the StateStore, and delegates to unsynchronized parts it guards with its
// lock: Membership (membership.h: members, ranks, leases, epochs, history),
// BasisLedger (basis_ledger.h: proposals, acknowledgements, commits,
// versions, bytes) and TensorRegistry (tensor_registry.h). What needs several
// of them (owners, the frozen horizon's postponements, commits when members
// change, the policy's fit to the tensors) is decided here.
//
// Semantics (see proto/gift/v1/cluster.proto for the contract with members):
//   - Epoch: +1 for every join, leave (including a drained member's leave)
//     and lease expiry; each bump re-ranks workers (dense 0..P-1) and servers
//     (shard ids 0..S-1), reassigns orphaned basis owners and recomputes the
//     shard map. Ranks are stable: a survivor keeps its rank while it is
//     below the new count; only the holes are refilled, from the members whose
//     rank is out of range, in rank order, then new members in join order.
//   - Admission: a worker that joins once the cluster has stepped (a member
//     worker reported a step above 0) is admitted at
//     admit_step = frozen_through_step + 1, a step nobody may have started.
//     Until every member worker has reported admit_step - 1 it holds a lease
//     but is outside ClusterState.workers (no rank, no epoch bump, not
//     persisted; a coordinator restart forgets it and it joins again), and
//     the horizon stays below admit_step; then it enters with one epoch bump
//     at last step admit_step - 1 and the horizon moves on. So no step's
//     world changes after the step may have started, and a returning worker
//     never blocks the others at a step they are past. Servers, and workers
//     of a cluster that has not stepped (none of its workers has reported a
//     step above 0, or it has no workers), join at once (admit step 0).
//   - Tensor registration does not bump the epoch: the new tensors' chunks
//     are added to the current shard map without moving existing chunks
//     (ExtendShardMap), so a (step, chunk) assignment never changes within an
//     epoch. The map is persisted, so a restart within an epoch keeps it.
//   - Revision: +1 for every change a watcher can see. Heartbeats that only
//     renew a lease or report a step without moving frozen_through_step do
//     not make a new revision, so a snapshot's Member.last_step and
//     lease_expires_unix_ms are as of its revision (GetStatus is current).
//     Nor do acknowledgements that do not commit a proposal (they are
//     persisted; only the commit is news): otherwise every acknowledgement
//     sent every watcher a snapshot, P^2 snapshots per refresh.
//   - frozen_through_step = max over workers of last_step + step_window,
//     at most a joining worker's admit_step - 1; it never decreases (also
//     across restarts).
//   - Refresh: PublishBasis by the tensor's owner makes a proposal with the
//     tentative activation step frozen_through_step + activation_lead_steps,
//     acknowledged by the publisher itself. It commits, at its tentative
//     step, as soon as every current worker has acknowledged it (leavers no
//     longer count, joiners must acknowledge too). Pending tentative steps
//     are always above frozen_through_step: when frozen_through_step would
//     reach one, it moves to the new frozen_through_step + lead
//     (postponements + 1). So no step sees two versions and every worker holds
//     the bytes before their first use. A newer publication replaces a pending
//     proposal (the newest version wins; the replaced bytes are dropped).
//     Committed versions that no worker can still use (their successor is
//     active at every worker's next step) are pruned.
//   - Every change is committed to the StateStore before the call returns,
//     and applied only if that commit succeeds: when it fails the call fails
//     (Unavailable) and memory is rolled back to the stored state (reloaded
//     from the store; members keep their in-memory leases and steps, which
//     are renewed without commits). When even that reload fails, every call
//     fails Unavailable until one succeeds. Watchers never see a revision
//     that was not committed.
//   - Policy: SetPolicy and SetRank validate the whole policy
//     (policy::Validate) and its ranks against the registered tensors
//     (policy::ValidateRanksForTensors): InvalidArgument naming the field and
//     value. A registration that would make the stored policy's ranks
//     senseless is refused (FailedPrecondition).
//
// Thread safety: all public methods are internally synchronized. The change
// callback runs on the calling thread after the state's lock is released.
#ifndef GIFT_SERVER_COORDINATOR_CLUSTER_STATE_H_
#define GIFT_SERVER_COORDINATOR_CLUSTER_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/policy/policy.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"
#include "server/coordinator/basis_ledger.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/state_store.h"
#include "server/coordinator/tensor_registry.h"

namespace gift::coordinator {

// The source of time; injected so that tests control lease expiry.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// absl::Now(). Process-wide, thread-safe, never destroyed.
Clock* RealClock();

struct ClusterOptions {
  absl::Duration lease_ttl = absl::Seconds(10);
  uint64_t step_window = 8;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint64_t max_basis_bytes = uint64_t{256} << 20;
  // The data-plane MAC the coordinator prefers while data-plane
  // authentication is on (gift-coordinator --dataplane-mac):
  // ClusterState.dataplane_mac names it for every epoch whose workers and
  // servers all list it, AES-256-GMAC otherwise. UNSPECIFIED: authentication
  // off, the state names no MAC.
  gift::v1::MacAlgorithm dataplane_mac = gift::v1::MAC_ALGORITHM_UNSPECIFIED;
};

// The MAC of an epoch's data-plane keys (ClusterState.dataplane_mac):
// `preferred` when every worker and server of `state` lists it in its
// dataplane_macs (an empty list: AES-256-GMAC only, a build before
// negotiation), else AES-256-GMAC, which every build has.
gift::v1::MacAlgorithm NegotiatedMac(gift::v1::MacAlgorithm preferred,
                                     const gift::v1::ClusterState& state);

class ClusterStateMachine {
 public:
  // Loads the state from `store` (a new cluster when the file is fresh).
  // Members found in it get a fresh lease of one TTL. `clock` must outlive
  // the ClusterStateMachine.
  static absl::StatusOr<std::unique_ptr<ClusterStateMachine>> Create(
      const ClusterOptions& options, std::unique_ptr<StateStore> store, Clock* clock);

  // Called (outside the lock) after every call that made a new revision. Set
  // it before concurrent use.
  void SetChangeCallback(std::function<void()> callback);

  absl::StatusOr<gift::v1::JoinResponse> Join(const gift::v1::JoinRequest& request);
  absl::StatusOr<gift::v1::LeaveResponse> Leave(const gift::v1::LeaveRequest& request);
  absl::StatusOr<gift::v1::HeartbeatResponse> Heartbeat(const gift::v1::HeartbeatRequest& request);
  // Implemented in cluster_state_registration.cc.
  absl::StatusOr<gift::v1::RegisterTensorsResponse> RegisterTensors(
      const gift::v1::RegisterTensorsRequest& request);

  // The checks of a publication that need no bytes (member, owner, version,
  // size); PublishBasis repeats them.
  absl::Status CheckPublish(const gift::v1::BasisHeader& header);
  // Verifies the bytes (size, CRC-32C, parse, tensor id / version / shape) and
  // makes the proposal.
  absl::StatusOr<gift::v1::PublishBasisResponse> PublishBasis(const gift::v1::BasisHeader& header,
                                                              std::string bytes);

  struct BasisData {
    gift::v1::BasisHeader header;              // member_id is the tensor's owner
    std::shared_ptr<const std::string> bytes;  // empty for a direct version
  };
  // A committed or proposed version.
  absl::StatusOr<BasisData> FetchBasis(const gift::v1::FetchBasisRequest& request);
  absl::StatusOr<gift::v1::AckBasisResponse> AckBasis(const gift::v1::AckBasisRequest& request);

  gift::v1::Policy GetPolicy();
  absl::StatusOr<gift::v1::Policy> SetPolicy(const gift::v1::SetPolicyRequest& request);
  absl::StatusOr<gift::v1::RequestRefreshResponse> RequestRefresh(
      const gift::v1::RequestRefreshRequest& request);
  absl::StatusOr<gift::v1::SetRankResponse> SetRank(const gift::v1::SetRankRequest& request);
  absl::StatusOr<gift::v1::DrainResponse> Drain(const gift::v1::DrainRequest& request);
  // A new training run unless run_id is the current one (coordinator.proto
  // StartRun): InvalidArgument for an empty or overlong id; a member id must
  // be a live worker.
  absl::StatusOr<gift::v1::StartRunResponse> StartRun(const gift::v1::StartRunRequest& request);
  absl::StatusOr<gift::v1::StatusResponse> GetStatus();

  // A member's report that another failed (ReportPeerFailure,
  // coordinator.proto). `confirmed` is the caller's own check of the suspect
  // (the service: its Watch stream closed, member_connections.h). Confirmed:
  // the suspect is removed as by a lease expiry (event "fail", +1 epoch,
  // re-ranked) and evicted=true. Not confirmed: FailedPrecondition naming
  // the suspect, nothing changes. A suspect that is no longer live: OK with
  // evicted=false (many members report one failure). InvalidArgument for an
  // empty suspect id or a self-report; the reporter's Membership::Live error
  // when the reporter is not live. Implemented in cluster_state_failures.cc.
  absl::StatusOr<gift::v1::ReportPeerFailureResponse> ReportPeerFailure(
      const gift::v1::ReportPeerFailureRequest& request, bool confirmed);

  // Evicts (event "disconnect", +1 epoch each, as a confirmed report would)
  // every live member that a step in
  // progress waits for and that `disconnected` (the service: its connection
  // to this coordinator died, member_connections.h) says is gone: a worker
  // while another worker is in a step it has not completed, a server while
  // any worker is in a step. Joining workers are not waited for. Returns
  // the evicted members' ids (empty: nothing changed). A slow member whose
  // connection lives (a straggler) is never evicted here. Implemented in
  // cluster_state_failures.cc.
  absl::StatusOr<std::vector<std::string>> EvictAwaitedDisconnected(
      absl::FunctionRef<bool(const std::string&)> disconnected);

  // Removes the members whose lease has run out (each bumps the epoch). Also
  // done at the start of every other call.
  absl::Status ExpireLeases();

  // The state at the current revision; shared by all callers until the next
  // revision.
  std::shared_ptr<const gift::v1::ClusterState> Snapshot();
  uint64_t revision();

  const ClusterOptions& options() const { return options_; }

  // Events since this process started (for metrics).
  struct Counters {
    uint64_t basis_commits = 0;
    uint64_t basis_postponements = 0;  // activation steps moved later
  };
  Counters counters();

 private:
  ClusterStateMachine(const ClusterOptions& options, std::unique_ptr<StateStore> store,
                      Clock* clock)
      : options_(options), store_(std::move(store)), clock_(clock), started_(clock->Now()) {}

  // Runs `fn` under the lock after expiring leases, commits, and notifies.
  template <typename Fn>
  auto Run(Fn fn) -> decltype(fn());

  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Memory from a stored state: meta, members, tensors, bases.
  void ApplyStoredLocked(StoredState stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed commit: memory back to the store's state (see the header).
  void RollBackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retries a failed rollback; Unavailable while it still fails.
  absl::Status RestoreIfStaleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A change watchers must see: a new revision, persisted.
  void TouchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A change to persist that does not warrant a new revision (an
  // acknowledgement that does not commit a proposal): watchers are not woken,
  // and a snapshot of the current revision may show it or not.
  void MarkDirtyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLeasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // After an epoch bump: admits the ready joining workers (+1 epoch each),
  // then ranks, owners, shard map, proposals; the horizon after admissions.
  void OnMembershipChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the cluster has stepped: a member worker reported a step above
  // 0 since the cluster last had no worker (Membership::stepped; a joining
  // worker then waits for its admit step).
  bool StartedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AssignOwnersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceFrozenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits the proposal of `basis` when every current worker acknowledged
  // (then prunes it).
  void MaybeCommitLocked(gift::v1::TensorBasisState* basis) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> RequestRefreshLocked(const std::string& glob)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<gift::v1::Policy> SetPolicyLocked(const gift::v1::Policy& policy,
                                                   uint64_t expected_version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckPublishLocked(const gift::v1::BasisHeader& header)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checks of a registration request against `registry` (the current
  // one, or an empty one for a registration that starts a new run), before
  // anything is applied.
  absl::Status CheckRegistrationLocked(const gift::v1::RegisterTensorsRequest& request,
                                       const TensorRegistry& registry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new run `run_id` (generation + 1, base step above every begun step):
  // the tensors and bases dropped (named in `response`), a new epoch. `by`
  // is logged. Implemented in cluster_state_training_run.cc, as are the two
  // below.
  void StartRunLocked(const std::string& run_id, const std::string& by,
                      gift::v1::StartRunResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the current run has training clients (Member.client of its
  // generation, live workers) and none of them is connected.
  bool RunClientsLeftLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member.client := `client` unless it is stale (HeartbeatRequest.client);
  // a change is a new revision.
  void NoteClientLocked(gift::v1::Member* member, const gift::v1::TrainingClient& client)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member.registration_error of the (live worker) registrant: `outcome`'s
  // text when refused, cleared when OK; a change is a new revision, so the
  // other workers learn at once that this one cannot push.
  void NoteRegistrationLocked(const std::string& member_id, const absl::Status& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker reported `step` completed or begun: records when the highest
  // such step was first seen (slowest_wait_ms, StepWait.waited_ms).
  void NoteStepReachedLocked(uint64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long `step` has waited: since it was first reported begun or
  // completed, or since the epoch (or this process) began when later.
  int64_t StepWaitedMsLocked(uint64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The workers of the epoch that have neither completed nor begun `step`,
  // ascending rank.
  gift::v1::StepWait StepWaitLocked(uint64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  gift::v1::ClusterState BuildStateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClusterOptions options_;
  const std::unique_ptr<StateStore> store_;
  Clock* const clock_;
  const absl::Time started_;
  std::function<void()> on_change_;

  absl::Mutex mu_;
  // The meta record; its epoch and next_member_seq live in membership_ (and
  // are filled in here on commit).
  StoredMeta meta_ ABSL_GUARDED_BY(mu_);
  Membership membership_ ABSL_GUARDED_BY(mu_);
  BasisLedger ledger_ ABSL_GUARDED_BY(mu_);
  TensorRegistry registry_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool stale_ ABSL_GUARDED_BY(mu_) = false;  // a rollback could not reload
  std::shared_ptr<const gift::v1::ClusterState> snapshot_ ABSL_GUARDED_BY(mu_);
  // When a worker first reported each new highest step, completed or begun
  // (in memory; entries below every worker's next step are pruned), and
  // when the current epoch began in this process: GetStatus's
  // slowest_wait_ms.
  std::map<uint64_t, absl::Time> step_first_seen_ ABSL_GUARDED_BY(mu_);
  uint64_t max_step_seen_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time epoch_started_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_CLUSTER_STATE_H_
