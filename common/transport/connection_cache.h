// Connections of one Transport kept by peer address, so that a component
// that talks to the same peers step after step (a worker to its aggregators,
// an aggregator to its workers) connects once per peer, and drops the entry
// when the transport reports the peer failed.
//
//   ConnectionCache cache;
//   GIFT_ASSIGN_OR_RETURN(PeerId peer, cache.Get(*transport, address));
//   ... on_peer_failure = [&](PeerId peer, const absl::Status&) { cache.Forget(peer); }
//
// Ownership: holds no reference to the transport; pass the same one to every
// Get. Thread safety: thread-safe. Get connects outside its lock (Connect
// waits for the transport's progress thread), so it must not be called from
// the transport's own callbacks; Forget may be.
#ifndef GIFT_COMMON_TRANSPORT_CONNECTION_CACHE_H_
#define GIFT_COMMON_TRANSPORT_CONNECTION_CACHE_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/transport.h"

namespace gift::transport {

class ConnectionCache {
 public:
  // The peer connected to `address`, connecting on first use. Errors are
  // Connect's; nothing is cached for them.
  absl::StatusOr<PeerId> Get(Transport& transport, const std::string& address);

  // Drops the entry of `peer` (no-op when it has none).
  void Forget(PeerId peer);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, PeerId> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_CONNECTION_CACHE_H_
