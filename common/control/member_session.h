// A member's session with the coordinator: the one object a worker or an
// aggregator server keeps for its life in the cluster.
//
//   MemberSessionOptions options;
//   options.name = "host-3/gpu0";
//   auto session = MemberSession::Start(CoordinatorClient::MakeChannel(addr), options);
//   if (!session.ok()) return session.status();
//   auto state = (*session)->WaitFor([](const gift::v1::ClusterState& s) {
//     return s.workers_size() == 4;
//   }, absl::Seconds(30));
//
// Start joins (Join) and then runs two background threads:
//   - the lease thread sends a Heartbeat every lease TTL / 4 (or
//     options.heartbeat_interval), carrying the last step the owner reported
//     through SetLastStep. When the coordinator answers that the lease is gone
//     (NOT_FOUND: unknown member; FAILED_PRECONDITION: lease expired) it joins
//     again under the same name, which gives a new member id and usually a
//     new rank and epoch; each such re-join is counted (rejoins()) and
//     reported to options.on_rejoin. A worker joining (or re-joining) a
//     cluster that has stepped is admitted at a step the coordinator names
//     (identity().admit_step, coordinator.proto JoinResponse): it is outside
//     the state's workers until the others reach that step, and must not
//     push a step below it.
//   - the watch thread keeps a Watch stream open and stores each ClusterState
//     it receives. When the stream breaks (coordinator restarted, network) it
//     reconnects with exponential backoff (options.min_backoff ..
//     options.max_backoff) and gets a fresh snapshot first. A state of a
//     later epoch that no longer names the member (evicted while it was
//     stopped or cut off) wakes the lease thread to beat at once, so the
//     re-join starts when the member hears of its eviction.
// The member's rank and epoch follow the latest state (or heartbeat answer)
// that names the member.
//
// Data-plane keys (docs/design.md section 8.2): when the coordinator runs with
// data-plane authentication, its Join and Heartbeat answers carry this
// member's key, and the session fetches its peers' keys (GetDataPlaneKeys)
// before it installs a state that names a peer it has no key for, so that
// whoever sees a state's epoch finds its keys in chunk_keys(epoch).
//
// Close (or the destructor) stops both threads and sends Leave.
//
// Ownership: shares the channel; owns its threads. Thread safety: every
// public method may be called from any thread concurrently, except that the
// destructor must not race with other calls. Callbacks (on_rejoin) run on
// the lease thread and must not call Close.
#ifndef GIFT_COMMON_CONTROL_MEMBER_SESSION_H_
#define GIFT_COMMON_CONTROL_MEMBER_SESSION_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control/coordinator_client.h"
#include "common/control/dataplane_keyring.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_mac.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"

namespace gift::control {

// A training client's registration of tensors (MemberSession::RegisterTensors).
struct ClientRegistration {
  uint64_t registration = 0;  // 0: not a client's registration
  bool new_run_when_clients_left = false;
};

struct MemberSessionOptions {
  std::string name;  // unique among live members, e.g. "host-3/gpu0"; required
  gift::v1::MemberRole role = gift::v1::MEMBER_ROLE_WORKER;
  std::string data_address;
  std::string control_address;
  // The host it runs on (JoinRequest.node; workers: the node group of
  // node-local aggregation). Empty: a node of its own.
  std::string node;
  // The data-plane MACs it offers at Join (JoinRequest.dataplane_macs; the
  // coordinator picks each epoch's from its members' lists): every MAC of
  // this build by default. Empty: none listed, AES-256-GMAC only, as a
  // member of a build before MAC negotiation (the tests stand one in so).
  std::vector<dataplane::MacAlgorithm> dataplane_macs = {std::begin(dataplane::kMacAlgorithms),
                                                         std::end(dataplane::kMacAlgorithms)};
  // Deadline of each unary call (and of basis publish / fetch).
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Zero: a quarter of the lease TTL the coordinator grants.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // Backoff between Watch reconnections and between re-join attempts.
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // Called after a successful re-join with the status that said the lease
  // was lost.
  std::function<void(const absl::Status& lease_lost)> on_rejoin;
};

// Who the member is in the current epoch.
struct MemberIdentity {
  std::string member_id;
  uint32_t rank = 0;  // workers: data-parallel rank; servers: shard id
  uint64_t epoch = 0;
  // Workers: the first step this member may push; 0: any step.
  uint64_t admit_step = 0;
};

class MemberSession {
 public:
  // Joins and starts the background threads. Fails with the Join's status
  // (e.g. UNAVAILABLE, ALREADY_EXISTS) or INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<MemberSession>> Start(
      std::shared_ptr<grpc::Channel> channel, MemberSessionOptions options);

  // Close(), ignoring its status.
  ~MemberSession();

  MemberSession(const MemberSession&) = delete;
  MemberSession& operator=(const MemberSession&) = delete;

  // Stops the threads and leaves the cluster. Returns the Leave's status;
  // later calls return OK and do nothing. After Close the state stays
  // readable; the RPC helpers below still work but the lease is gone.
  absl::Status Close();

  MemberIdentity identity() const;
  std::string member_id() const;
  uint32_t rank() const;
  uint64_t epoch() const;
  int64_t lease_ttl_ms() const;
  // Times the session joined again after losing its lease.
  uint64_t rejoins() const;
  // The coordinator's answer that said the lease was lost, at the last
  // re-join (e.g. "member m3 was evicted at step 12 (its lease expired),
  // cluster at step 30; join again"); OK before any.
  absl::Status lease_lost() const;

  // The latest cluster state received (never null; from Join until the
  // first Watch message).
  std::shared_ptr<const gift::v1::ClusterState> state() const;

  // Blocks until the latest state satisfies `predicate` (evaluated under the
  // session's lock: keep it cheap, call nothing of the session) and returns
  // that state; DEADLINE_EXCEEDED after `timeout`, CANCELLED when closed.
  absl::StatusOr<std::shared_ptr<const gift::v1::ClusterState>> WaitFor(
      const std::function<bool(const gift::v1::ClusterState&)>& predicate,
      absl::Duration timeout) const;
  // WaitFor(state.revision() >= revision).
  absl::StatusOr<std::shared_ptr<const gift::v1::ClusterState>> WaitForRevision(
      uint64_t revision, absl::Duration timeout) const;

  // Records the last completed step; the next heartbeat reports it (the
  // first one above 0 at once).
  void SetLastStep(uint64_t step);
  // Records the step the member has begun and not completed (0: none); the
  // next heartbeat reports it (HeartbeatRequest.waiting_step) and stores
  // the coordinator's answer of who that step waits for.
  void SetWaitingStep(uint64_t step);
  // The latest heartbeat answer of who the waiting step waits for (empty,
  // step 0, when none or after SetWaitingStep moved to another step).
  gift::v1::StepWait step_wait() const;
  // Records a basis owner's latest error ratios; every heartbeat from now on
  // reports them (HeartbeatRequest.error_ratios).
  void SetErrorRatios(std::vector<gift::v1::TensorErrorRatio> ratios);
  // Records the worker's training client (Member.client); every heartbeat
  // from now on reports it, and one goes out at once when it changed (a
  // client that left counts for a new run only once the coordinator knows).
  void SetTrainingClient(const gift::v1::TrainingClient& client);
  // Sends a heartbeat now (with the last step) instead of waiting for the
  // lease thread; returns its status (a lost lease is handled by the lease
  // thread at its next beat).
  absl::Status HeartbeatNow();

  // Reports that the member `suspect_member_id` failed on this member's data
  // plane (ReportPeerFailure): the coordinator's answer (FAILED_PRECONDITION
  // "not confirmed" while the suspect is still connected to it).
  absl::StatusOr<gift::v1::ReportPeerFailureResponse> ReportPeerFailure(
      const std::string& suspect_member_id, const std::string& reason) const;

  // Starts the training run `run_id` unless it is the current one
  // (StartRun), then waits (up to the RPC timeout) until the session's state
  // shows it.
  absl::StatusOr<gift::v1::StartRunResponse> StartRun(const std::string& run_id) const;
  // Registers tensors under this member (RegisterTensors). A training
  // client's registration names its number (RegisterTensorsRequest.
  // client_registration) and, without a run id, asks for a new run when every
  // client of the current one has left; when that started a run, waits (up
  // to the RPC timeout) until the session's state shows it, as StartRun does.
  absl::StatusOr<gift::v1::RegisterTensorsResponse> RegisterTensors(
      const std::vector<gift::v1::TensorSpec>& tensors,
      const ClientRegistration& client = {}) const;
  // A basis version's own codecs (BasisVersion.push_codec / pull_codec);
  // unset: the tensor's resolved ones.
  struct VersionCodecs {
    std::optional<gift::v1::CodecSpec> push;
    std::optional<gift::v1::CodecSpec> pull;
  };
  // Publishes a basis version this member owns: `bytes` is the serialized
  // basis (common/transform/basis_serialization.h), sent in 1 MiB chunks with
  // its CRC-32C; `direct` versions carry no bytes.
  absl::StatusOr<gift::v1::PublishBasisResponse> PublishBasis(
      uint64_t tensor_id, uint64_t version, uint32_t rank, absl::string_view bytes,
      bool direct = false, const VersionCodecs& codecs = {}) const;
  // Fetches a version (size and CRC-32C checked) ...
  absl::StatusOr<FetchedBasis> FetchBasis(uint64_t tensor_id, uint64_t version) const;
  // ... and acknowledges it once it is usable.
  absl::StatusOr<gift::v1::AckBasisResponse> AckBasis(uint64_t tensor_id, uint64_t version) const;

  // Whether the coordinator hands out data-plane keys (chunks must be
  // sealed and checked).
  bool dataplane_auth() const;
  // This member's data-plane keys of `epoch` (one of the last few states'
  // epochs); null when authentication is off or the epoch is unknown here.
  std::shared_ptr<const dataplane::EpochKeys> chunk_keys(uint64_t epoch) const;
  // Fetches the keys the latest state names that this member lacks (a
  // peer's, or its node key once it is in a node group) and rebuilds that
  // state's epoch keys when it got some (or has none of that epoch yet). The watch thread does so
  // for every state it receives, best effort; a step that finds a key missing calls this (one RPC
  // when something is missing, none otherwise).
  void FetchMissingKeys();
  // Whether the current state names a peer (or, for a worker in a node
  // group, a node) whose key this member has not fetched; false when
  // authentication is off. The lease thread fetches them again at every
  // beat while this holds.
  bool keys_missing() const;

  const CoordinatorClient& client() const { return client_; }

 private:
  MemberSession(std::shared_ptr<grpc::Channel> channel, MemberSessionOptions options);

  // Join, without holding the lock across the call ...
  absl::StatusOr<gift::v1::JoinResponse> SendJoin() const;
  // ... and its result: the member key, the peers' keys, then (under the
  // lock) the new identity, lease and (unless older) state.
  absl::Status InstallJoin(gift::v1::JoinResponse joined) ABSL_LOCKS_EXCLUDED(mu_);
  void InstallJoinLocked(gift::v1::JoinResponse joined) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fetches the peers' data-plane keys when `state` names one without a key
  // here (best effort: a peer still without a key gets its chunks refused).
  // True when it added keys.
  bool RefreshPeerKeys(const gift::v1::ClusterState& state, const std::string& member_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The epoch keys of the stored state (after the state or a key changed).
  void RebuildChunkKeysLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One heartbeat with the current identity and this deadline; updates the
  // epoch.
  absl::Status SendHeartbeat(absl::Duration timeout);
  // Installs `state` when it is not older than the stored one and updates
  // rank and epoch from it.
  void InstallState(gift::v1::ClusterState state) ABSL_LOCKS_EXCLUDED(mu_);
  void InstallStateLocked(gift::v1::ClusterState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to `d` unless closing; returns false when closing.
  bool SleepUnlessClosing(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // The lease thread's wait for its next beat: up to `d`, less when a state
  // says this member was evicted (beat_now_); false when closing.
  bool SleepUntilBeat(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration HeartbeatInterval() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void LeaseLoop();
  void WatchLoop();

  const MemberSessionOptions options_;
  const CoordinatorClient client_;

  mutable absl::Mutex mu_;
  MemberIdentity identity_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ttl_ms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t waiting_step_ ABSL_GUARDED_BY(mu_) = 0;
  gift::v1::StepWait step_wait_ ABSL_GUARDED_BY(mu_);
  std::vector<gift::v1::TensorErrorRatio> error_ratios_ ABSL_GUARDED_BY(mu_);
  std::optional<gift::v1::TrainingClient> training_client_ ABSL_GUARDED_BY(mu_);
  uint64_t rejoins_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status lease_lost_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // A state named this member (since its last join); a later one without it
  // sets beat_now_, which wakes the lease thread.
  bool named_in_state_ ABSL_GUARDED_BY(mu_) = false;
  bool beat_now_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const gift::v1::ClusterState> state_ ABSL_GUARDED_BY(mu_);
  DataPlaneKeyring keyring_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<const dataplane::EpochKeys>> chunk_keys_ ABSL_GUARDED_BY(mu_);
  // The open Watch call, so that Close can cancel it.
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::thread lease_thread_;
  std::thread watch_thread_;
};

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_MEMBER_SESSION_H_
