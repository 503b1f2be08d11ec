#include "common/control/peer_failure_reporter.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/base/logging.h"

namespace gift::control {
namespace {

using gift::logging::Level;
using gift::logging::Log;

// The addresses of the peers a transport connected to, shared between the
// decorator and its failure callback (which the inner transport holds).
struct PeerAddresses {
  absl::Mutex mu;
  absl::flat_hash_map<transport::PeerId, std::string> by_peer ABSL_GUARDED_BY(mu);
};

// Forwards to `inner`, recording each connected peer's address.
class ReportingTransport final : public transport::Transport {
 public:
  ReportingTransport(std::unique_ptr<transport::Transport> inner,
                     std::shared_ptr<PeerAddresses> peers)
      : inner_(std::move(inner)), peers_(std::move(peers)) {}

  std::string address() const override { return inner_->address(); }
  absl::StatusOr<transport::PeerId> Connect(absl::string_view address) override {
    absl::StatusOr<transport::PeerId> peer = inner_->Connect(address);
    if (peer.ok()) {
      absl::MutexLock lock(&peers_->mu);
      peers_->by_peer[*peer] = std::string(address);
    }
    return peer;
  }
  absl::Status Send(transport::PeerId peer, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, transport::SendCallback done) override {
    return inner_->Send(peer, header, payload, std::move(done));
  }
  void Disconnect(transport::PeerId peer) override {
    {
      absl::MutexLock lock(&peers_->mu);
      peers_->by_peer.erase(peer);
    }
    inner_->Disconnect(peer);
  }
  absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> RegisterMemory(
      absl::Span<uint8_t> buffer) override {
    return inner_->RegisterMemory(buffer);
  }
  std::string name() const override { return inner_->name(); }

 private:
  const std::unique_ptr<transport::Transport> inner_;
  const std::shared_ptr<PeerAddresses> peers_;
};

const gift::v1::Member* FindByDataAddress(const gift::v1::ClusterState& state,
                                          const std::string& address) {
  for (const auto* members : {&state.workers(), &state.servers()}) {
    for (const gift::v1::Member& m : *members) {
      if (m.data_address() == address) return &m;
    }
  }
  return nullptr;
}

}  // namespace

PeerFailureReporter::PeerFailureReporter() : thread_([this] { Loop(); }) {}

PeerFailureReporter::~PeerFailureReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

transport::TransportFactory PeerFailureReporter::Wrap(transport::TransportFactory inner) {
  return [this, inner = std::move(inner)](transport::TransportHandlers handlers)
             -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
    auto peers = std::make_shared<PeerAddresses>();
    transport::PeerFailureHandler next = std::move(handlers.on_peer_failure);
    handlers.on_peer_failure = [this, peers, next](transport::PeerId peer,
                                                   const absl::Status& reason) {
      std::string address;
      {
        absl::MutexLock lock(&peers->mu);
        auto it = peers->by_peer.find(peer);
        if (it != peers->by_peer.end()) {
          address = std::move(it->second);
          peers->by_peer.erase(it);
        }
      }
      if (!address.empty()) OnPeerFailure(std::move(address), reason);
      if (next) next(peer, reason);
    };
    absl::StatusOr<std::unique_ptr<transport::Transport>> made = inner(std::move(handlers));
    if (!made.ok()) return made.status();
    return std::unique_ptr<transport::Transport>(
        new ReportingTransport(*std::move(made), std::move(peers)));
  };
}

void PeerFailureReporter::Attach(MemberSession* session) {
  absl::MutexLock lock(&session_mu_);
  session_ = session;
}

void PeerFailureReporter::Detach() {
  absl::MutexLock lock(&session_mu_);
  session_ = nullptr;
}

PeerFailureReporter::Counters PeerFailureReporter::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void PeerFailureReporter::OnPeerFailure(std::string address, const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  ++counters_.failures;
  for (const Failure& f : queue_) {
    if (f.address == address) return;  // already queued
  }
  queue_.push_back({.address = std::move(address),
                    .reason = std::string(reason.message()),
                    .not_before = absl::InfinitePast()});
}

bool PeerFailureReporter::Report(const Failure& failure) {
  const std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
  const gift::v1::Member* suspect = FindByDataAddress(*state, failure.address);
  if (suspect == nullptr || suspect->member_id() == session_->member_id()) return true;  // moot
  const std::string suspect_id = suspect->member_id();
  absl::StatusOr<gift::v1::ReportPeerFailureResponse> result =
      session_->ReportPeerFailure(suspect_id, failure.reason);
  {
    absl::MutexLock lock(&mu_);
    ++counters_.reports;
    if (result.ok() && result->evicted()) ++counters_.evictions;
  }
  Log(result.ok() ? Level::kInfo : Level::kWarning, "peer_failure_reported",
      {{"suspect", suspect_id},
       {"reason", failure.reason},
       {"evicted", result.ok() && result->evicted()},
       {"result", result.ok() ? std::string("OK") : result.status().ToString()}});
  return result.ok();
}

void PeerFailureReporter::Loop() {
  while (true) {
    Failure failure;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      failure = std::move(queue_.front());
      queue_.pop_front();
      // Not before its retry time (but at once on stop).
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      const absl::Duration wait = failure.not_before - absl::Now();
      if (wait > absl::ZeroDuration() && mu_.AwaitWithTimeout(absl::Condition(&stopping), wait)) {
        return;
      }
    }
    bool settled = false;
    bool attached = false;
    {
      absl::MutexLock lock(&session_mu_);
      attached = session_ != nullptr;
      if (attached) settled = Report(failure);
    }
    if (settled) continue;
    if (attached && ++failure.attempts >= kRetries) continue;  // the lease decides
    failure.not_before = absl::Now() + (attached ? kRetryDelay : absl::Milliseconds(50));
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(failure));
  }
}

}  // namespace gift::control
