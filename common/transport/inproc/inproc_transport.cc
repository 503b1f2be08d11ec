#include "common/transport/inproc/inproc_transport.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gift::transport {

class InprocTransport final : public Transport {
 public:
  InprocTransport(InprocHub* hub, TransportHandlers handlers);
  ~InprocTransport() override;

  std::string address() const override { return absl::StrCat("inproc:", id_); }
  absl::StatusOr<PeerId> Connect(absl::string_view address) override;
  absl::Status Send(PeerId peer, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, SendCallback done) override;
  void Disconnect(PeerId peer) override;
  std::string name() const override { return "inproc"; }

 private:
  struct Link {
    uint64_t target = 0;   // the other transport's id
    PeerId remote_id = 0;  // how the other transport names us
    bool ours = false;     // created by our Connect
  };

  // Runs `fn` on the progress thread.
  void Post(std::function<void()> fn);
  void Loop();
  // A peer id for the other end of a connection made by `target`.
  PeerId AddIncoming(uint64_t target, PeerId remote_id);
  // Our connected peers whose target is `dead`: reported failed.
  void OnTransportGone(uint64_t dead);

  InprocHub* const hub_;
  const TransportHandlers handlers_;
  uint64_t id_ = 0;
  std::thread thread_;

  absl::Mutex mu_;
  absl::flat_hash_map<PeerId, Link> links_ ABSL_GUARDED_BY(mu_);
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

InprocTransport::InprocTransport(InprocHub* hub, TransportHandlers handlers)
    : hub_(hub), handlers_(std::move(handlers)) {
  {
    absl::MutexLock lock(&hub_->mu_);
    id_ = hub_->next_id_++;
    hub_->transports_[id_] = this;
  }
  thread_ = std::thread([this] { Loop(); });
}

InprocTransport::~InprocTransport() {
  std::vector<InprocTransport*> others;
  {
    // Once unregistered, nobody can post to us; the others learn we are gone.
    absl::MutexLock lock(&hub_->mu_);
    hub_->transports_.erase(id_);
    for (auto& [id, t] : hub_->transports_) t->OnTransportGone(id_);
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void InprocTransport::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void InprocTransport::Loop() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](InprocTransport* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || !t->queue_.empty(); },
          this));
      if (stop_) return;  // undelivered messages die with the transport
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

PeerId InprocTransport::AddIncoming(uint64_t target, PeerId remote_id) {
  absl::MutexLock lock(&mu_);
  const PeerId id = next_peer_++;
  links_[id] = {.target = target, .remote_id = remote_id, .ours = false};
  return id;
}

void InprocTransport::OnTransportGone(uint64_t dead) {
  absl::MutexLock lock(&mu_);
  std::vector<PeerId> failed;
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->second.target != dead) {
      ++it;
      continue;
    }
    if (it->second.ours) failed.push_back(it->first);
    links_.erase(it++);
  }
  if (!handlers_.on_peer_failure) return;
  for (PeerId peer : failed) {
    queue_.push_back([this, peer] {
      handlers_.on_peer_failure(peer, absl::UnavailableError("peer transport was destroyed"));
    });
  }
}

absl::StatusOr<PeerId> InprocTransport::Connect(absl::string_view address) {
  uint64_t target = 0;
  if (!absl::ConsumePrefix(&address, "inproc:") || !absl::SimpleAtoi(address, &target)) {
    return absl::InvalidArgumentError(absl::StrCat("not an in-process address: '", address, "'"));
  }
  absl::MutexLock hub_lock(&hub_->mu_);
  auto it = hub_->transports_.find(target);
  if (it == hub_->transports_.end()) {
    return absl::UnavailableError(absl::StrCat("no in-process transport ", target));
  }
  PeerId local;
  {
    absl::MutexLock lock(&mu_);
    local = next_peer_++;
  }
  const PeerId remote = it->second->AddIncoming(id_, local);
  absl::MutexLock lock(&mu_);
  links_[local] = {.target = target, .remote_id = remote, .ours = true};
  return local;
}

absl::Status InprocTransport::Send(PeerId peer, absl::Span<const uint8_t> header,
                                   absl::Span<const uint8_t> payload, SendCallback done) {
  if (header.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header of ", header.size(), " bytes exceeds ", kMaxHeaderBytes));
  }
  Link link;
  {
    absl::MutexLock lock(&mu_);
    auto it = links_.find(peer);
    if (it == links_.end()) {
      return absl::NotFoundError(absl::StrCat("peer ", peer, " is not connected"));
    }
    link = it->second;
  }
  Message message{.from = link.remote_id,
                  .header = std::vector<uint8_t>(header.begin(), header.end()),
                  .payload = std::vector<uint8_t>(payload.begin(), payload.end())};
  {
    absl::MutexLock hub_lock(&hub_->mu_);
    auto it = hub_->transports_.find(link.target);
    if (it == hub_->transports_.end()) {
      return absl::UnavailableError(absl::StrCat("peer ", peer, " is gone"));
    }
    InprocTransport* target = it->second;
    target->Post([target, m = std::move(message)]() mutable {
      if (target->handlers_.place_payload) {
        absl::Span<uint8_t> dest = target->handlers_.place_payload(m.from, m.header, m.payload.size());
        if (dest.data() != nullptr && dest.size() == m.payload.size()) {
          std::copy(m.payload.begin(), m.payload.end(), dest.begin());
          m.placed = dest;
          m.payload.clear();
        }
      }
      target->handlers_.on_receive(std::move(m));
    });
  }
  Post([done = std::move(done)] { done(absl::OkStatus()); });
  return absl::OkStatus();
}

void InprocTransport::Disconnect(PeerId peer) {
  absl::MutexLock lock(&mu_);
  links_.erase(peer);
}

absl::StatusOr<std::unique_ptr<Transport>> CreateInprocTransport(InprocHub* hub,
                                                                 TransportHandlers handlers) {
  if (hub == nullptr) return absl::InvalidArgumentError("null hub");
  if (!handlers.on_receive) return absl::InvalidArgumentError("on_receive handler is required");
  return std::unique_ptr<Transport>(new InprocTransport(hub, std::move(handlers)));
}

}  // namespace gift::transport
