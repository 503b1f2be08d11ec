#include "common/control/member_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/control/member_text.h"

namespace gift::control {

namespace v1 = ::gift::v1;

namespace {

// The coordinator's answer to a heartbeat of a member whose lease is gone.
bool IsLeaseLost(const absl::Status& status) {
  return absl::IsNotFound(status) || absl::IsFailedPrecondition(status);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemberSession>> MemberSession::Start(
    std::shared_ptr<grpc::Channel> channel, MemberSessionOptions options) {
  if (options.name.empty()) return absl::InvalidArgumentError("MemberSession: empty name");
  if (options.rpc_timeout <= absl::ZeroDuration() || options.min_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.min_backoff ||
      options.heartbeat_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "MemberSession: rpc_timeout and min_backoff must be positive, max_backoff >= "
        "min_backoff, heartbeat_interval >= 0");
  }
  std::unique_ptr<MemberSession> session(new MemberSession(std::move(channel), std::move(options)));
  absl::StatusOr<v1::JoinResponse> joined = session->SendJoin();
  if (!joined.ok()) {
    absl::MutexLock lock(&session->mu_);
    session->closed_ = true;  // nothing to leave, no threads
    return joined.status();
  }
  if (absl::Status s = session->InstallJoin(*std::move(joined)); !s.ok()) {
    session->Close().IgnoreError();
    return s;
  }
  session->lease_thread_ = std::thread(&MemberSession::LeaseLoop, session.get());
  session->watch_thread_ = std::thread(&MemberSession::WatchLoop, session.get());
  return session;
}

MemberSession::MemberSession(std::shared_ptr<grpc::Channel> channel, MemberSessionOptions options)
    : options_(std::move(options)),
      client_(std::move(channel), options_.rpc_timeout),
      state_(std::make_shared<v1::ClusterState>()),
      keyring_(options_.role) {}

MemberSession::~MemberSession() { Close().IgnoreError(); }

absl::Status MemberSession::Close() {
  std::string member_id;
  {
    absl::MutexLock lock(&mu_);
    if (closing_ || closed_) {
      closing_ = true;
      return absl::OkStatus();
    }
    closing_ = true;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    member_id = identity_.member_id;
  }
  absl::StatusOr<v1::LeaveResponse> left = client_.Leave(member_id);
  return left.status();
}

absl::StatusOr<v1::JoinResponse> MemberSession::SendJoin() const {
  v1::JoinRequest request;
  request.set_name(options_.name);
  request.set_role(options_.role);
  request.set_data_address(options_.data_address);
  request.set_control_address(options_.control_address);
  request.set_node(options_.node);
  for (dataplane::MacAlgorithm mac : options_.dataplane_macs) {
    request.add_dataplane_macs(static_cast<v1::MacAlgorithm>(mac));
  }
  return client_.Join(request);
}

absl::Status MemberSession::InstallJoin(v1::JoinResponse joined) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::StatusOr<bool> set = keyring_.SetMemberKey(joined.dataplane_key()); !set.ok()) {
      return set.status();
    }
  }
  RefreshPeerKeys(joined.state(), joined.member_id());
  absl::MutexLock lock(&mu_);
  InstallJoinLocked(std::move(joined));
  return absl::OkStatus();
}

bool MemberSession::RefreshPeerKeys(const v1::ClusterState& state, const std::string& member_id) {
  {
    absl::MutexLock lock(&mu_);
    if (!keyring_.MissingPeers(state, member_id)) return false;
  }
  absl::StatusOr<v1::DataPlaneKeys> keys = client_.GetDataPlaneKeys(member_id);
  if (!keys.ok()) return false;
  absl::MutexLock lock(&mu_);
  return keyring_.AddPeers(*keys).ok();  // a malformed answer adds nothing
}

void MemberSession::FetchMissingKeys() {
  std::shared_ptr<const v1::ClusterState> state;
  std::string member_id;
  {
    absl::MutexLock lock(&mu_);
    state = state_;
    member_id = identity_.member_id;
  }
  const bool added = RefreshPeerKeys(*state, member_id);
  absl::MutexLock lock(&mu_);
  // Unchanged keys are not rebuilt: a new object would make the server
  // daemon apply its epoch again for nothing (AggregatorDaemon::CompleteKeys).
  if (added || !chunk_keys_.contains(state_->epoch())) RebuildChunkKeysLocked();
}

void MemberSession::RebuildChunkKeysLocked() {
  absl::StatusOr<std::shared_ptr<const dataplane::EpochKeys>> keys =
      keyring_.Build(*state_, identity_.member_id);
  if (!keys.ok() || *keys == nullptr) return;
  chunk_keys_[state_->epoch()] = *std::move(keys);
  constexpr size_t kEpochsKept = 4;
  while (chunk_keys_.size() > kEpochsKept) chunk_keys_.erase(chunk_keys_.begin());
}

bool MemberSession::keys_missing() const {
  absl::MutexLock lock(&mu_);
  return keyring_.MissingPeers(*state_, identity_.member_id);
}

bool MemberSession::dataplane_auth() const {
  absl::MutexLock lock(&mu_);
  return keyring_.enabled();
}

std::shared_ptr<const dataplane::EpochKeys> MemberSession::chunk_keys(uint64_t epoch) const {
  absl::MutexLock lock(&mu_);
  auto it = chunk_keys_.find(epoch);
  return it == chunk_keys_.end() ? nullptr : it->second;
}

void MemberSession::InstallJoinLocked(v1::JoinResponse joined) {
  identity_.member_id = joined.member_id();
  identity_.rank = joined.rank();
  identity_.epoch = joined.epoch();
  identity_.admit_step = joined.admit_step();
  lease_ttl_ms_ = joined.lease_ttl_ms();
  named_in_state_ = false;
  // The Watch stream may already have delivered something newer.
  if (joined.has_state() && (joined.state().revision() >= state_->revision() ||
                             joined.state().cluster_id() != state_->cluster_id())) {
    InstallStateLocked(std::move(*joined.mutable_state()));
  }
}

void MemberSession::InstallState(v1::ClusterState state) {
  absl::MutexLock lock(&mu_);
  InstallStateLocked(std::move(state));
}

void MemberSession::InstallStateLocked(v1::ClusterState state) {
  if (const v1::Member* me = FindMember(state, identity_.member_id); me != nullptr) {
    identity_.rank = me->rank();
    identity_.epoch = state.epoch();
    named_in_state_ = true;
  } else if (named_in_state_ && state.epoch() > identity_.epoch) {
    // A later epoch without this member: it was evicted (e.g. stopped past
    // its lease, or cut off). The lease thread beats now, and the answer
    // starts the re-join at once instead of at the next beat, up to a
    // quarter of the lease later.
    beat_now_ = true;
  }
  state_ = std::make_shared<const v1::ClusterState>(std::move(state));
  RebuildChunkKeysLocked();
}

absl::Duration MemberSession::HeartbeatInterval() const {
  if (options_.heartbeat_interval > absl::ZeroDuration()) return options_.heartbeat_interval;
  // Without a TTL from the coordinator, beat often enough for any sane one.
  if (lease_ttl_ms_ <= 0) return absl::Milliseconds(250);
  return absl::Milliseconds(lease_ttl_ms_) / 4;
}

bool MemberSession::SleepUnlessClosing(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&closing_), d);
  return !closing_;
}

absl::Status MemberSession::SendHeartbeat(absl::Duration timeout) {
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_member_id(identity_.member_id);
    request.set_epoch(identity_.epoch);
    request.set_last_step(last_step_);
    request.set_waiting_step(waiting_step_);
    for (const v1::TensorErrorRatio& r : error_ratios_) *request.add_error_ratios() = r;
    if (training_client_.has_value()) *request.mutable_client() = *training_client_;
  }
  absl::StatusOr<v1::HeartbeatResponse> response = client_.Heartbeat(request, timeout);
  if (!response.ok()) return response.status();
  {
    absl::MutexLock lock(&mu_);
    // A re-join may have replaced the identity while the call was in flight.
    if (identity_.member_id != request.member_id()) return absl::OkStatus();
    if (response->epoch() > identity_.epoch) identity_.epoch = response->epoch();
    if (waiting_step_ != 0 && response->step_wait().step() == waiting_step_) {
      step_wait_ = response->step_wait();
    }
    // A new member key (the coordinator restarted with another secret):
    // every key changed.
    absl::StatusOr<bool> changed = keyring_.SetMemberKey(response->dataplane_key());
    if (!changed.ok()) return changed.status();
    if (*changed) {
      chunk_keys_.clear();
    } else if (!keyring_.MissingPeers(*state_, identity_.member_id)) {
      return absl::OkStatus();
    }
  }
  // A new member key, or a peer's key still missing (its fetch failed, or
  // ran under an identity a re-join has since replaced): fetched again at
  // every beat until it is here.
  FetchMissingKeys();
  return absl::OkStatus();
}

absl::Status MemberSession::HeartbeatNow() { return SendHeartbeat(options_.rpc_timeout); }

bool MemberSession::SleepUntilBeat(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ || beat_now_; };
  mu_.AwaitWithTimeout(absl::Condition(&woken), d);
  beat_now_ = false;
  return !closing_;
}

void MemberSession::LeaseLoop() {
  absl::Duration interval;
  {
    absl::MutexLock lock(&mu_);
    interval = HeartbeatInterval();
  }
  while (SleepUntilBeat(interval)) {
    // Waiting longer than the next beat would only delay that beat.
    const absl::Status beat = SendHeartbeat(std::min(options_.rpc_timeout, interval));
    if (!IsLeaseLost(beat)) continue;  // OK, or transient: the next beat retries
    {
      absl::MutexLock lock(&mu_);
      lease_lost_ = beat;
    }
    absl::Duration backoff = options_.min_backoff;
    while (true) {
      absl::StatusOr<v1::JoinResponse> joined = SendJoin();
      if (joined.ok() && InstallJoin(*std::move(joined)).ok()) {
        {
          absl::MutexLock lock(&mu_);
          ++rejoins_;
          interval = HeartbeatInterval();
          // The Watch stream was opened under the old member id: reopened
          // under the new one, the coordinator counts it for this member
          // (member_connections.h), so that its end, when this process
          // dies, is seen as this member's.
          if (watch_context_ != nullptr) watch_context_->TryCancel();
        }
        if (options_.on_rejoin) options_.on_rejoin(beat);
        break;
      }
      if (!SleepUnlessClosing(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

void MemberSession::WatchLoop() {
  absl::Duration backoff = options_.min_backoff;
  while (true) {
    grpc::ClientContext context;
    v1::WatchRequest request;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      watch_context_ = &context;
      request.set_member_id(identity_.member_id);
    }
    // after_revision 0: a (re)connected stream starts with a full snapshot.
    std::unique_ptr<grpc::ClientReader<v1::ClusterState>> reader = client_.Watch(&context, request);
    v1::ClusterState state;
    while (reader->Read(&state)) {
      RefreshPeerKeys(state, member_id());
      InstallState(std::move(state));
      state.Clear();
      // A re-join may have replaced the identity between the fetch and the
      // install (the fetch under the evicted id is refused): the keys of
      // the installed state are completed under the current one.
      if (keys_missing()) FetchMissingKeys();
      backoff = options_.min_backoff;
    }
    reader->Finish().IgnoreError();  // why it ended does not change what we do
    {
      absl::MutexLock lock(&mu_);
      watch_context_ = nullptr;
    }
    if (!SleepUnlessClosing(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

MemberIdentity MemberSession::identity() const {
  absl::MutexLock lock(&mu_);
  return identity_;
}

std::string MemberSession::member_id() const {
  absl::MutexLock lock(&mu_);
  return identity_.member_id;
}

uint32_t MemberSession::rank() const {
  absl::MutexLock lock(&mu_);
  return identity_.rank;
}

uint64_t MemberSession::epoch() const {
  absl::MutexLock lock(&mu_);
  return identity_.epoch;
}

int64_t MemberSession::lease_ttl_ms() const {
  absl::MutexLock lock(&mu_);
  return lease_ttl_ms_;
}

uint64_t MemberSession::rejoins() const {
  absl::MutexLock lock(&mu_);
  return rejoins_;
}

absl::Status MemberSession::lease_lost() const {
  absl::MutexLock lock(&mu_);
  return lease_lost_;
}

std::shared_ptr<const v1::ClusterState> MemberSession::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::StatusOr<std::shared_ptr<const v1::ClusterState>> MemberSession::WaitFor(
    const std::function<bool(const v1::ClusterState&)>& predicate, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ || predicate(*state_); };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (predicate(*state_)) return state_;
  if (closing_) return absl::CancelledError("MemberSession closed while waiting for a state");
  return absl::DeadlineExceededError(
      absl::StrCat("no cluster state satisfied the condition within ",
                   absl::FormatDuration(timeout), " (latest revision ", state_->revision(), ")"));
}

absl::StatusOr<std::shared_ptr<const v1::ClusterState>> MemberSession::WaitForRevision(
    uint64_t revision, absl::Duration timeout) const {
  return WaitFor([revision](const v1::ClusterState& s) { return s.revision() >= revision; },
                 timeout);
}

void MemberSession::SetErrorRatios(std::vector<gift::v1::TensorErrorRatio> ratios) {
  absl::MutexLock lock(&mu_);
  error_ratios_ = std::move(ratios);
}

void MemberSession::SetTrainingClient(const gift::v1::TrainingClient& client) {
  absl::MutexLock lock(&mu_);
  if (training_client_.has_value() &&
      training_client_->registration() == client.registration() &&
      training_client_->run_generation() == client.run_generation() &&
      training_client_->connected() == client.connected()) {
    return;
  }
  training_client_ = client;
  beat_now_ = true;
}

void MemberSession::SetLastStep(uint64_t step) {
  absl::MutexLock lock(&mu_);
  // The first step above 0 goes out at once, not up to a quarter of the
  // lease later: until some worker reports one, the coordinator takes the
  // job for one that has not stepped and lets a joining worker straight
  // into the world.
  if (last_step_ == 0 && step > 0) beat_now_ = true;
  last_step_ = step;
}

void MemberSession::SetWaitingStep(uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (step != waiting_step_) step_wait_.Clear();
  waiting_step_ = step;
}

v1::StepWait MemberSession::step_wait() const {
  absl::MutexLock lock(&mu_);
  return step_wait_;
}

absl::StatusOr<v1::ReportPeerFailureResponse> MemberSession::ReportPeerFailure(
    const std::string& suspect_member_id, const std::string& reason) const {
  v1::ReportPeerFailureRequest request;
  request.set_reporter_member_id(member_id());
  request.set_suspect_member_id(suspect_member_id);
  request.set_reason(reason);
  return client_.ReportPeerFailure(request);
}

absl::StatusOr<v1::StartRunResponse> MemberSession::StartRun(const std::string& run_id) const {
  v1::StartRunRequest request;
  request.set_member_id(member_id());
  request.set_run_id(run_id);
  absl::StatusOr<v1::StartRunResponse> response = client_.StartRun(request);
  if (!response.ok()) return response.status();
  // The run's state (its tensors dropped, its epoch) before anything else.
  absl::Status seen = WaitForRevision(response->revision(), options_.rpc_timeout).status();
  if (!seen.ok()) return seen;
  return response;
}

absl::StatusOr<v1::RegisterTensorsResponse> MemberSession::RegisterTensors(
    const std::vector<v1::TensorSpec>& tensors, const ClientRegistration& client) const {
  v1::RegisterTensorsRequest request;
  request.set_member_id(member_id());
  for (const v1::TensorSpec& t : tensors) *request.add_tensors() = t;
  request.set_client_registration(client.registration);
  request.set_new_run_when_clients_left(client.new_run_when_clients_left);
  absl::StatusOr<v1::RegisterTensorsResponse> response = client_.RegisterTensors(request);
  if (!response.ok() || !response->run_started()) return response;
  // The new run's state (its tensors dropped, its epoch) before anything else.
  absl::Status seen = WaitForRevision(response->revision(), options_.rpc_timeout).status();
  if (!seen.ok()) return seen;
  return response;
}

absl::StatusOr<v1::PublishBasisResponse> MemberSession::PublishBasis(
    uint64_t tensor_id, uint64_t version, uint32_t rank, absl::string_view bytes, bool direct,
    const VersionCodecs& codecs) const {
  v1::BasisHeader header;
  if (codecs.push.has_value()) *header.mutable_push_codec() = *codecs.push;
  if (codecs.pull.has_value()) *header.mutable_pull_codec() = *codecs.pull;
  header.set_member_id(member_id());
  header.set_tensor_id(tensor_id);
  header.set_version(version);
  header.set_rank(rank);
  header.set_direct(direct);
  return client_.PublishBasis(std::move(header), bytes);
}

absl::StatusOr<FetchedBasis> MemberSession::FetchBasis(uint64_t tensor_id, uint64_t version) const {
  return client_.FetchBasis(member_id(), tensor_id, version);
}

absl::StatusOr<v1::AckBasisResponse> MemberSession::AckBasis(uint64_t tensor_id,
                                                             uint64_t version) const {
  return client_.AckBasis(member_id(), tensor_id, version);
}

}  // namespace gift::control
