// The gift.v1.Coordinator gRPC service (callback API) over a ClusterStateMachine.
//
// Every RPC converts the ClusterStateMachine's absl::Status to its gRPC status
// (common/rpc/grpc_status.h). Streams:
//   - PublishBasis: the first message carries the header, which is checked at
//     once (owner, version, size limit); then data of at most
//     kMaxBasisChunkBytes per message, rejected as soon as it exceeds the
//     announced size. The bytes are verified when the client half-closes.
//   - FetchBasis: the header in the first message, then the bytes in chunks of
//     kMaxBasisChunkBytes.
//   - Watch: the current state (unless the client has seen its revision), then
//     one snapshot per new revision. A slow client gets only the newest state
//     when its previous write completes (revisions coalesce). Ends with
//     UNAVAILABLE on Shutdown, CANCELLED when the client goes away.
//     WatchRequest.member_id is not checked: operators watch without one.
//     The streams are counted by member id (member_connections.h): a
//     member's stream closing is what confirms a report of its failure.
//   - ReportPeerFailure: confirmed when the suspect's Watch stream has
//     closed; a report that is not confirmed yet is remembered briefly and
//     confirmed when that stream closes (see member_connections.h).
//   - Without a report: a member whose every stream has closed while a step
//     waits for it is evicted as soon as both are true, checked when its
//     stream closes and on each heartbeat of a worker in a step
//     (ClusterStateMachine::EvictAwaitedDisconnected). With the endpoint's
//     keepalive (gift-coordinator --keepalive) a stopped or cut-off member's
//     connection closes within interval + timeout, so such a member stalls
//     the others about that long, not a lease.
//
// Ownership: does not own the ClusterStateMachine, which must outlive the service.
// The service is the state's change callback, so it must outlive every call
// into the state (stop the grpc::Server and the lease thread first).
// Thread safety: gRPC calls the methods concurrently; Shutdown may be called
// from any thread, once.
#ifndef GIFT_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
#define GIFT_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/dataplane_key_issuer.h"
#include "server/coordinator/member_connections.h"

namespace gift::coordinator {

inline constexpr size_t kMaxBasisChunkBytes = size_t{1} << 20;

class CoordinatorService final : public gift::v1::Coordinator::CallbackService {
 public:
  // `version` is reported by GetStatus. Registers itself as `state`'s change
  // callback. With `dataplane_keys` (not owned; outlives the service),
  // data-plane authentication is on: Join and Heartbeat answers carry the
  // member's key and GetDataPlaneKeys serves the peers' (see
  // dataplane_key_issuer.h); null: off.
  CoordinatorService(ClusterStateMachine* state, std::string version,
                     const DataPlaneKeyIssuer* dataplane_keys = nullptr);

  // Ends every Watch with UNAVAILABLE; later calls fail with UNAVAILABLE.
  void Shutdown();

  // Waits until every Watch stream has ended (its reactor is done with the
  // service); false when `timeout` passed first. After Shutdown and a true
  // return the service may be destroyed while its server runs on, if no
  // further call is routed to it (a server that forwards calls to a
  // replaceable service). A stream whose client stopped reading ends only
  // when the server cancels it.
  bool AwaitWatchersEnded(absl::Duration timeout);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const gift::v1::JoinRequest* request,
                                 gift::v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const gift::v1::LeaveRequest* request,
                                  gift::v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const gift::v1::HeartbeatRequest* request,
                                      gift::v1::HeartbeatResponse* response) override;
  grpc::ServerWriteReactor<gift::v1::ClusterState>* Watch(
      grpc::CallbackServerContext* context, const gift::v1::WatchRequest* request) override;
  grpc::ServerUnaryReactor* ReportPeerFailure(
      grpc::CallbackServerContext* context, const gift::v1::ReportPeerFailureRequest* request,
      gift::v1::ReportPeerFailureResponse* response) override;
  grpc::ServerUnaryReactor* RegisterTensors(grpc::CallbackServerContext* context,
                                            const gift::v1::RegisterTensorsRequest* request,
                                            gift::v1::RegisterTensorsResponse* response) override;
  grpc::ServerReadReactor<gift::v1::PublishBasisRequest>* PublishBasis(
      grpc::CallbackServerContext* context, gift::v1::PublishBasisResponse* response) override;
  grpc::ServerWriteReactor<gift::v1::BasisChunk>* FetchBasis(
      grpc::CallbackServerContext* context, const gift::v1::FetchBasisRequest* request) override;
  grpc::ServerUnaryReactor* AckBasis(grpc::CallbackServerContext* context,
                                     const gift::v1::AckBasisRequest* request,
                                     gift::v1::AckBasisResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const gift::v1::GetPolicyRequest* request,
                                      gift::v1::Policy* response) override;
  grpc::ServerUnaryReactor* SetPolicy(grpc::CallbackServerContext* context,
                                      const gift::v1::SetPolicyRequest* request,
                                      gift::v1::Policy* response) override;
  grpc::ServerUnaryReactor* RequestRefresh(grpc::CallbackServerContext* context,
                                           const gift::v1::RequestRefreshRequest* request,
                                           gift::v1::RequestRefreshResponse* response) override;
  grpc::ServerUnaryReactor* SetRank(grpc::CallbackServerContext* context,
                                    const gift::v1::SetRankRequest* request,
                                    gift::v1::SetRankResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const gift::v1::GetStatusRequest* request,
                                      gift::v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const gift::v1::DrainRequest* request,
                                  gift::v1::DrainResponse* response) override;
  grpc::ServerUnaryReactor* StartRun(grpc::CallbackServerContext* context,
                                     const gift::v1::StartRunRequest* request,
                                     gift::v1::StartRunResponse* response) override;
  grpc::ServerUnaryReactor* GetDataPlaneKeys(grpc::CallbackServerContext* context,
                                             const gift::v1::GetDataPlaneKeysRequest* request,
                                             gift::v1::DataPlaneKeys* response) override;

 private:
  class WatchReactor;
  class PublishReactor;
  class FetchReactor;

  // Finishes a unary call with `access` when it denies the call (the
  // caller's role check), else UNAVAILABLE when shutting down, else with
  // the result of `fn`.
  template <typename Response, typename Fn>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const grpc::Status& access,
                                  Response* response, Fn fn);

  // Adds a watcher unless shutting down (then returns false).
  bool AddWatcher(WatchReactor* watcher);
  void RemoveWatcher(WatchReactor* watcher);
  void NotifyWatchers();
  // Evicts the members a step in progress waits for whose connection is gone
  // (ClusterStateMachine::EvictAwaitedDisconnected over connections_).
  void EvictAwaitedDisconnected();

  // The member key of `member_id` into `key` (authentication on only).
  absl::Status SetMemberKey(const std::string& member_id, gift::v1::DataPlaneKey* key) const;
  // The keys of the peers `member_id` verifies; PermissionDenied when a TLS
  // caller's role is not the member's.
  absl::StatusOr<gift::v1::DataPlaneKeys> PeerKeys(const grpc::CallbackServerContext& context,
                                                   const std::string& member_id) const;

  ClusterStateMachine* const state_;
  const std::string version_;
  const DataPlaneKeyIssuer* const dataplane_keys_;
  std::atomic<bool> shutting_down_{false};

  absl::Mutex watchers_mu_;
  std::set<WatchReactor*> watchers_ ABSL_GUARDED_BY(watchers_mu_);
  MemberConnections connections_;
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
