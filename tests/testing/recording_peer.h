// A transport endpoint that records every message it receives, connected to
// one address: the fake worker of the aggregator shard's unit tests (its
// pushes go out on `transport` to `peer`, the shard's results pile up in
// `inbox`). An in-process fake for unit logic; it starts no process.
//
//   auto w = test::RecordingPeer::Connect(
//       [&](transport::TransportHandlers h) { return CreateInprocTransport(&hub, std::move(h)); },
//       shard->address());
//   ASSERT_TRUE(w.ok()) << w.status();
//   (*w)->transport->Send((*w)->peer, header, payload, on_sent);
//   ASSERT_TRUE((*w)->WaitFor(1));
//
// Ownership: owns its transport (destroyed with it). Thread safety: the
// transport's receive thread appends to `inbox` under `mu`; WaitFor and
// Received take `mu` and may be called from any thread; read `inbox`
// directly only while holding `mu`.
#ifndef GIFT_TESTS_TESTING_RECORDING_PEER_H_
#define GIFT_TESTS_TESTING_RECORDING_PEER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/transport.h"

namespace gift::test {

struct RecordingPeer {
  using Factory = std::function<absl::StatusOr<std::unique_ptr<transport::Transport>>(
      transport::TransportHandlers)>;

  // A transport from `make` whose every received message lands in `inbox`,
  // connected to `address` (the connection is `peer`). Fails with the
  // transport's or the connection's status.
  static absl::StatusOr<std::unique_ptr<RecordingPeer>> Connect(const Factory& make,
                                                                const std::string& address) {
    auto p = std::make_unique<RecordingPeer>();
    RecordingPeer* raw = p.get();
    auto t = make({.on_receive = [raw](transport::Message m) {
      absl::MutexLock lock(&raw->mu);
      raw->inbox.push_back(std::move(m));
    }});
    if (!t.ok()) return t.status();
    p->transport = *std::move(t);
    auto peer = p->transport->Connect(address);
    if (!peer.ok()) return peer.status();
    p->peer = *peer;
    return p;
  }

  // True once `n` messages arrived (false after `timeout`).
  bool WaitFor(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu);
    auto enough = [&] { return inbox.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // A copy of what arrived so far.
  std::vector<transport::Message> Received() {
    absl::MutexLock lock(&mu);
    return inbox;
  }

  absl::Mutex mu;
  std::vector<transport::Message> inbox ABSL_GUARDED_BY(mu);
  std::unique_ptr<transport::Transport> transport;  // declared after inbox: destroyed first
  transport::PeerId peer = 0;
};

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_RECORDING_PEER_H_
