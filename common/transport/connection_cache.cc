#include "common/transport/connection_cache.h"

namespace gift::transport {

absl::StatusOr<PeerId> ConnectionCache::Get(Transport& transport, const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = peers_.find(address); it != peers_.end()) return it->second;
  }
  absl::StatusOr<PeerId> peer = transport.Connect(address);
  if (!peer.ok()) return peer.status();
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = peers_.try_emplace(address, *peer);
  // Another thread connected meanwhile: keep its connection, close ours.
  if (!inserted) transport.Disconnect(*peer);
  return it->second;
}

void ConnectionCache::Forget(PeerId peer) {
  absl::MutexLock lock(&mu_);
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if (it->second == peer) {
      peers_.erase(it);
      return;
    }
  }
}

}  // namespace gift::transport
