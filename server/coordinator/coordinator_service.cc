#include "server/coordinator/coordinator_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/policy/policy.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/role_check.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

grpc::Status ShuttingDown() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
}

// Who may call what, by certificate role (common/rpc/role_check.h; plaintext
// development listeners check nothing): members (workers and servers) run the
// membership and basis RPCs; only operators change the policy, ranks and
// refreshes; servers may also Drain (the SIGTERM drain of their own shard);
// reads (Watch, GetPolicy, GetStatus) are open to every role.
using rpc::CheckRole;
using rpc::Role;

grpc::Status CheckMember(const grpc::CallbackServerContext& context, absl::string_view rpc) {
  return CheckRole(context, rpc, {Role::kWorker, Role::kServer});
}

grpc::Status CheckAnyRole(const grpc::CallbackServerContext& context, absl::string_view rpc) {
  return CheckRole(context, rpc, {Role::kWorker, Role::kServer, Role::kOperator});
}

// A worker certificate joins as a worker, a server certificate as a server.
grpc::Status CheckJoinRole(const grpc::CallbackServerContext& context,
                           const gift::v1::JoinRequest& request) {
  switch (request.role()) {
    case gift::v1::MEMBER_ROLE_WORKER:
      return CheckRole(context, "Join as a worker", {Role::kWorker});
    case gift::v1::MEMBER_ROLE_SERVER:
      return CheckRole(context, "Join as a server", {Role::kServer});
    default:
      return CheckRole(context, "Join without a member role", {});
  }
}

}  // namespace

// ---- Watch ----------------------------------------------------------------

// Lifetime: reference counted. gRPC holds one reference until OnDone; the
// service's notifier holds one while it calls Poke. Every entry point holds a
// reference of its own, because gRPC may run reactions (and OnDone) inline
// inside StartWrite or Finish.
class CoordinatorService::WatchReactor final
    : public grpc::ServerWriteReactor<gift::v1::ClusterState> {
 public:
  WatchReactor(CoordinatorService* service, std::string member_id, uint64_t after_revision)
      : service_(service), member_id_(std::move(member_id)), sent_revision_(after_revision) {
    if (!service_->AddWatcher(this)) {
      finished_ = true;
      Finish(ShuttingDown());
      return;
    }
    Poke();
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Writes the newest state unless a write is in flight or it was sent.
  void Poke() {
    Ref();
    const gift::v1::ClusterState* message = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!writing_ && !finished_) {
        std::shared_ptr<const gift::v1::ClusterState> snapshot = service_->state_->Snapshot();
        if (snapshot->revision() > sent_revision_) {
          writing_ = true;
          sent_revision_ = snapshot->revision();
          in_flight_ = std::move(snapshot);
          message = in_flight_.get();
        }
      }
    }
    if (message != nullptr) StartWrite(message);
    Unref();
  }

  // Ends the stream with `status` (after the write in flight, if any).
  void End(grpc::Status status) {
    Ref();
    bool finish_now = false;
    {
      absl::MutexLock lock(&mu_);
      if (!finished_) {
        finished_ = true;
        if (writing_) {
          deferred_ = std::move(status);
          has_deferred_ = true;
        } else {
          finish_now = true;
        }
      }
    }
    if (finish_now) Finish(status);
    Unref();
  }

  void OnWriteDone(bool ok) override {
    Ref();
    bool finish_now = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      in_flight_.reset();
      if (has_deferred_) {
        has_deferred_ = false;
        finish_now = true;
        status = deferred_;
      } else if (!ok && !finished_) {
        finished_ = true;
        finish_now = true;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
      }
    }
    if (finish_now) {
      Finish(status);
    } else {
      Poke();
    }
    Unref();
  }

  void OnCancel() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "the watcher cancelled"));
  }

  void OnDone() override {
    service_->RemoveWatcher(this);
    Unref();
  }

  const std::string& member_id() const { return member_id_; }

 private:
  ~WatchReactor() override = default;

  CoordinatorService* const service_;
  const std::string member_id_;  // "" for operators
  std::atomic<int> refs_{1};
  absl::Mutex mu_;
  uint64_t sent_revision_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool has_deferred_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status deferred_ ABSL_GUARDED_BY(mu_);
  // The message being written; kept alive until OnWriteDone.
  std::shared_ptr<const gift::v1::ClusterState> in_flight_ ABSL_GUARDED_BY(mu_);
};

bool CoordinatorService::AddWatcher(WatchReactor* watcher) {
  absl::MutexLock lock(&watchers_mu_);
  if (shutting_down_.load()) return false;
  watchers_.insert(watcher);
  connections_.Opened(watcher->member_id());
  return true;
}

void CoordinatorService::RemoveWatcher(WatchReactor* watcher) {
  {
    absl::MutexLock lock(&watchers_mu_);
    if (!watchers_.contains(watcher)) return;
  }
  // The member's stream ended: the reports waiting for it are confirmed now.
  const std::string& member_id = watcher->member_id();
  for (const gift::v1::ReportPeerFailureRequest& report : connections_.Closed(member_id)) {
    if (shutting_down_.load()) break;
    absl::StatusOr<gift::v1::ReportPeerFailureResponse> result =
        state_->ReportPeerFailure(report, /*confirmed=*/true);
    if (!result.ok()) {
      Log(Level::kInfo, "peer_failure_report_dropped",
          {{"suspect", report.suspect_member_id()}, {"error", result.status().ToString()}});
    }
  }
  // A step waiting for this member now waits for a connection that is gone.
  if (!shutting_down_.load() && connections_.Disconnected(member_id)) EvictAwaitedDisconnected();
  // Last: AwaitWatchersEnded's caller may destroy the service once the set
  // is empty.
  absl::MutexLock lock(&watchers_mu_);
  watchers_.erase(watcher);
}

void CoordinatorService::EvictAwaitedDisconnected() {
  absl::StatusOr<std::vector<std::string>> evicted = state_->EvictAwaitedDisconnected(
      [this](const std::string& id) { return connections_.Disconnected(id); });
  if (!evicted.ok()) {
    Log(Level::kWarning, "awaited_member_eviction_failed",
        {{"error", evicted.status().ToString()}});
  }
}

bool CoordinatorService::AwaitWatchersEnded(absl::Duration timeout) {
  absl::MutexLock lock(&watchers_mu_);
  const auto ended = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchers_mu_) { return watchers_.empty(); };
  return watchers_mu_.AwaitWithTimeout(absl::Condition(&ended), timeout);
}

void CoordinatorService::NotifyWatchers() {
  std::vector<WatchReactor*> watchers;
  {
    absl::MutexLock lock(&watchers_mu_);
    for (WatchReactor* w : watchers_) {
      w->Ref();
      watchers.push_back(w);
    }
  }
  for (WatchReactor* w : watchers) {
    w->Poke();
    w->Unref();
  }
}

grpc::ServerWriteReactor<gift::v1::ClusterState>* CoordinatorService::Watch(
    grpc::CallbackServerContext* context, const gift::v1::WatchRequest* request) {
  if (grpc::Status denied = CheckAnyRole(*context, "Watch"); !denied.ok()) {
    return new rpc::RefusedWriter<gift::v1::ClusterState>(denied);
  }
  return new WatchReactor(this, request->member_id(), request->after_revision());
}

// ---- PublishBasis ---------------------------------------------------------

class CoordinatorService::PublishReactor final
    : public grpc::ServerReadReactor<gift::v1::PublishBasisRequest> {
 public:
  PublishReactor(ClusterStateMachine* state, gift::v1::PublishBasisResponse* response)
      : state_(state), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed: all bytes are here
      if (!has_header_) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the stream ended before a header arrived"));
        return;
      }
      absl::StatusOr<gift::v1::PublishBasisResponse> result =
          state_->PublishBasis(header_, std::move(bytes_));
      if (result.ok()) *response_ = *std::move(result);
      Finish(rpc::ToGrpcStatus(result.status()));
      return;
    }
    if (!has_header_) {
      if (!request_.has_header()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the first PublishBasis message must carry the header"));
        return;
      }
      header_ = request_.header();
      has_header_ = true;
      absl::Status checked = state_->CheckPublish(header_);
      if (!checked.ok()) {
        Finish(rpc::ToGrpcStatus(checked));
        return;
      }
      bytes_.reserve(header_.size_bytes());
    } else if (request_.has_header()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "only the first PublishBasis message may carry a header"));
      return;
    }
    const std::string& data = request_.data();
    if (data.size() > kMaxBasisChunkBytes) {
      Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("a message carries ", data.size(),
                                    " bytes of data, above the limit of ", kMaxBasisChunkBytes)));
      return;
    }
    if (bytes_.size() + data.size() > header_.size_bytes()) {
      Finish(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("more than the announced ", header_.size_bytes(), " bytes arrived")));
      return;
    }
    bytes_.append(data);
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  ClusterStateMachine* const state_;
  gift::v1::PublishBasisResponse* const response_;
  gift::v1::PublishBasisRequest request_;
  bool has_header_ = false;
  gift::v1::BasisHeader header_;
  std::string bytes_;
};

grpc::ServerReadReactor<gift::v1::PublishBasisRequest>* CoordinatorService::PublishBasis(
    grpc::CallbackServerContext* context, gift::v1::PublishBasisResponse* response) {
  if (grpc::Status denied = CheckMember(*context, "PublishBasis"); !denied.ok()) {
    return new rpc::RefusedReader<gift::v1::PublishBasisRequest>(denied);
  }
  if (shutting_down_.load()) {
    class Refused final : public grpc::ServerReadReactor<gift::v1::PublishBasisRequest> {
     public:
      Refused() { Finish(ShuttingDown()); }
      void OnDone() override { delete this; }
    };
    return new Refused();
  }
  return new PublishReactor(state_, response);
}

// ---- FetchBasis -----------------------------------------------------------

class CoordinatorService::FetchReactor final
    : public grpc::ServerWriteReactor<gift::v1::BasisChunk> {
 public:
  explicit FetchReactor(absl::StatusOr<ClusterStateMachine::BasisData> data) {
    if (!data.ok()) {
      Finish(rpc::ToGrpcStatus(data.status()));
      return;
    }
    data_ = *std::move(data);
    *chunk_.mutable_header() = data_.header;
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    if (offset_ >= size()) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.clear_header();
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  size_t size() const { return data_.bytes == nullptr ? 0 : data_.bytes->size(); }

  void WriteNext() {
    const size_t n = std::min(kMaxBasisChunkBytes, size() - offset_);
    if (n > 0) chunk_.set_data(data_.bytes->data() + offset_, n);
    offset_ += n;
    StartWrite(&chunk_);
  }

  ClusterStateMachine::BasisData data_;
  gift::v1::BasisChunk chunk_;
  size_t offset_ = 0;
};

grpc::ServerWriteReactor<gift::v1::BasisChunk>* CoordinatorService::FetchBasis(
    grpc::CallbackServerContext* context, const gift::v1::FetchBasisRequest* request) {
  if (grpc::Status denied = CheckMember(*context, "FetchBasis"); !denied.ok()) {
    return new rpc::RefusedWriter<gift::v1::BasisChunk>(denied);
  }
  if (shutting_down_.load())
    return new FetchReactor(absl::UnavailableError("the coordinator is shutting down"));
  return new FetchReactor(state_->FetchBasis(*request));
}

// ---- unary RPCs -----------------------------------------------------------

CoordinatorService::CoordinatorService(ClusterStateMachine* state, std::string version,
                                       const DataPlaneKeyIssuer* dataplane_keys)
    : state_(state), version_(std::move(version)), dataplane_keys_(dataplane_keys) {
  state_->SetChangeCallback([this] { NotifyWatchers(); });
}

void CoordinatorService::Shutdown() {
  std::vector<WatchReactor*> watchers;
  {
    absl::MutexLock lock(&watchers_mu_);
    shutting_down_.store(true);
    for (WatchReactor* w : watchers_) {
      w->Ref();
      watchers.push_back(w);
    }
  }
  for (WatchReactor* w : watchers) {
    w->End(ShuttingDown());
    w->Unref();
  }
}

template <typename Response, typename Fn>
grpc::ServerUnaryReactor* CoordinatorService::Unary(grpc::CallbackServerContext* context,
                                                    const grpc::Status& access, Response* response,
                                                    Fn fn) {
  if (!access.ok()) return rpc::FinishUnary(context, access);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (shutting_down_.load()) {
    reactor->Finish(ShuttingDown());
    return reactor;
  }
  absl::StatusOr<Response> result = fn();
  if (result.ok()) *response = *std::move(result);
  reactor->Finish(rpc::ToGrpcStatus(result.status()));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* context,
                                                   const gift::v1::JoinRequest* request,
                                                   gift::v1::JoinResponse* response) {
  return Unary(context, CheckJoinRole(*context, *request), response,
               [&]() -> absl::StatusOr<gift::v1::JoinResponse> {
                 auto joined = state_->Join(*request);
                 if (!joined.ok()) return joined;
                 connections_.Joined(joined->member_id());
                 if (dataplane_keys_ == nullptr) return joined;
                 if (auto s = SetMemberKey(joined->member_id(), joined->mutable_dataplane_key());
                     !s.ok()) {
                   return s;
                 }
                 return joined;
               });
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* context,
                                                    const gift::v1::LeaveRequest* request,
                                                    gift::v1::LeaveResponse* response) {
  return Unary(context, CheckMember(*context, "Leave"), response,
               [&] { return state_->Leave(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const gift::v1::HeartbeatRequest* request,
                                                        gift::v1::HeartbeatResponse* response) {
  return Unary(context, CheckMember(*context, "Heartbeat"), response,
               [&]() -> absl::StatusOr<gift::v1::HeartbeatResponse> {
                 auto beat = state_->Heartbeat(*request);
                 if (!beat.ok()) return beat;
                 // A worker in a step: is it waiting for a member that is gone?
                 if (request->waiting_step() > 0) EvictAwaitedDisconnected();
                 if (dataplane_keys_ == nullptr) return beat;
                 if (auto s = SetMemberKey(request->member_id(), beat->mutable_dataplane_key());
                     !s.ok()) {
                   return s;
                 }
                 return beat;
               });
}

grpc::ServerUnaryReactor* CoordinatorService::ReportPeerFailure(
    grpc::CallbackServerContext* context, const gift::v1::ReportPeerFailureRequest* request,
    gift::v1::ReportPeerFailureResponse* response) {
  return Unary(context, CheckMember(*context, "ReportPeerFailure"), response, [&] {
    return state_->ReportPeerFailure(*request, connections_.CheckOrRemember(*request));
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterTensors(
    grpc::CallbackServerContext* context, const gift::v1::RegisterTensorsRequest* request,
    gift::v1::RegisterTensorsResponse* response) {
  return Unary(context, CheckMember(*context, "RegisterTensors"), response,
               [&] { return state_->RegisterTensors(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::AckBasis(grpc::CallbackServerContext* context,
                                                       const gift::v1::AckBasisRequest* request,
                                                       gift::v1::AckBasisResponse* response) {
  return Unary(context, CheckMember(*context, "AckBasis"), response,
               [&] { return state_->AckBasis(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::GetPolicy(
    grpc::CallbackServerContext* context, const gift::v1::GetPolicyRequest* /*request*/,
    gift::v1::Policy* response) {
  return Unary(context, CheckAnyRole(*context, "GetPolicy"), response,
               [&]() -> absl::StatusOr<gift::v1::Policy> { return state_->GetPolicy(); });
}

grpc::ServerUnaryReactor* CoordinatorService::SetPolicy(grpc::CallbackServerContext* context,
                                                        const gift::v1::SetPolicyRequest* request,
                                                        gift::v1::Policy* response) {
  return Unary(context, CheckRole(*context, "SetPolicy", {Role::kOperator}), response,
               [&]() -> absl::StatusOr<gift::v1::Policy> { return state_->SetPolicy(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::RequestRefresh(
    grpc::CallbackServerContext* context, const gift::v1::RequestRefreshRequest* request,
    gift::v1::RequestRefreshResponse* response) {
  return Unary(context, CheckRole(*context, "RequestRefresh", {Role::kOperator}), response,
               [&] { return state_->RequestRefresh(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::SetRank(grpc::CallbackServerContext* context,
                                                      const gift::v1::SetRankRequest* request,
                                                      gift::v1::SetRankResponse* response) {
  return Unary(context, CheckRole(*context, "SetRank", {Role::kOperator}), response,
               [&] { return state_->SetRank(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::GetStatus(
    grpc::CallbackServerContext* context, const gift::v1::GetStatusRequest* /*request*/,
    gift::v1::StatusResponse* response) {
  return Unary(context, CheckAnyRole(*context, "GetStatus"), response,
               [&]() -> absl::StatusOr<gift::v1::StatusResponse> {
                 absl::StatusOr<gift::v1::StatusResponse> status = state_->GetStatus();
                 if (status.ok()) status->set_version(version_);
                 return status;
               });
}

grpc::ServerUnaryReactor* CoordinatorService::StartRun(grpc::CallbackServerContext* context,
                                                       const gift::v1::StartRunRequest* request,
                                                       gift::v1::StartRunResponse* response) {
  return Unary(context, CheckRole(*context, "StartRun", {Role::kOperator, Role::kWorker}), response,
               [&] { return state_->StartRun(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::Drain(grpc::CallbackServerContext* context,
                                                    const gift::v1::DrainRequest* request,
                                                    gift::v1::DrainResponse* response) {
  return Unary(context, CheckRole(*context, "Drain", {Role::kOperator, Role::kServer}), response,
               [&] { return state_->Drain(*request); });
}

// ---- Data-plane keys (docs/design.md section 8.2) ------------------------------

absl::Status CoordinatorService::SetMemberKey(const std::string& member_id,
                                              gift::v1::DataPlaneKey* key) const {
  static_assert(static_cast<int>(dataplane::MacAlgorithm::kAes256Gmac) ==
                    gift::v1::MAC_ALGORITHM_AES_256_GMAC &&
                static_cast<int>(dataplane::MacAlgorithm::kChaCha20Poly1305) ==
                    gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  auto k = dataplane_keys_->MemberKey(member_id);
  if (!k.ok()) return k.status();
  key->set_key(k->data(), k->size());
  key->set_algorithm(state_->Snapshot()->dataplane_mac());
  return absl::OkStatus();
}

absl::StatusOr<gift::v1::DataPlaneKeys> CoordinatorService::PeerKeys(
    const grpc::CallbackServerContext& context, const std::string& member_id) const {
  if (dataplane_keys_ == nullptr) {
    return absl::FailedPreconditionError("data-plane authentication is off");
  }
  std::shared_ptr<const gift::v1::ClusterState> state = state_->Snapshot();
  const gift::v1::Member* caller = nullptr;
  for (const auto* members : {&state->workers(), &state->servers()}) {
    for (const gift::v1::Member& m : *members) {
      if (m.member_id() == member_id) caller = &m;
    }
  }
  if (caller == nullptr) return absl::NotFoundError(absl::StrCat("unknown member ", member_id));
  const bool worker = caller->role() == gift::v1::MEMBER_ROLE_WORKER;
  // Over TLS the certificate must be of the member's role: a worker cannot
  // ask for a server's peers (the workers' keys) by naming a server.
  if (std::optional<Role> role = rpc::PeerRole(*context.auth_context());
      rpc::IsTlsPeer(*context.auth_context()) && role != (worker ? Role::kWorker : Role::kServer)) {
    return absl::PermissionDeniedError(
        absl::StrCat("member ", member_id, " is not of the caller's certificate role"));
  }
  gift::v1::DataPlaneKeys keys;
  keys.set_epoch(state->epoch());
  for (const gift::v1::Member& peer : worker ? state->servers() : state->workers()) {
    auto k = dataplane_keys_->MemberKey(peer.member_id());
    if (!k.ok()) return k.status();
    gift::v1::PeerDataPlaneKey* out = keys.add_peers();
    out->set_member_id(peer.member_id());
    out->set_rank(peer.rank());
    out->set_key(k->data(), k->size());
  }
  if (worker && !caller->node().empty()) {
    auto k = dataplane_keys_->NodeKey(caller->node());
    if (!k.ok()) return k.status();
    keys.set_node(caller->node());
    keys.set_node_key(k->data(), k->size());
  }
  return keys;
}

grpc::ServerUnaryReactor* CoordinatorService::GetDataPlaneKeys(
    grpc::CallbackServerContext* context, const gift::v1::GetDataPlaneKeysRequest* request,
    gift::v1::DataPlaneKeys* response) {
  return Unary(context, CheckMember(*context, "GetDataPlaneKeys"), response,
               [&] { return PeerKeys(*context, request->member_id()); });
}

}  // namespace gift::coordinator
