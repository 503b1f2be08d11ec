// The data-plane transport: reliable, ordered-per-peer messages of a small
// header plus a payload of any size between processes. One interface, one
// folder per implementation (as in Gloo):
//
//   ucx/     UCX active messages (ucx_transport.h): RDMA where the host has
//            it, else shared memory or TCP; rendezvous for large payloads;
//            peer failures reported through error-handling mode PEER.
//   inproc/  within one process (inproc_transport.h), for unit tests of the
//            logic above the transport.
//
//   auto t = CreateUcxTransport({.on_receive = [&](Message m) { ... }});
//   auto peer = (*t)->Connect(remote_address);      // bytes from the peer
//   (*t)->Send(*peer, header, payload, [](absl::Status s) { ... });
//
// Threading: every implementation runs its own progress thread. on_receive,
// on_peer_failure and send callbacks run on it, one at a time, in order of
// arrival per peer; they must not block for long and must not destroy the
// transport. All public methods are thread-safe.
//
// Ownership: Send does not copy the payload: it must stay valid and
// unchanged until the send callback runs. A received Message owns its bytes.
#ifndef GIFT_COMMON_TRANSPORT_TRANSPORT_H_
#define GIFT_COMMON_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gift::transport {

// Identifies a connection of one transport; never reused within it.
using PeerId = uint64_t;

// Header bytes every implementation carries (the data-plane header is far
// smaller). Send refuses more with InvalidArgument.
inline constexpr size_t kMaxHeaderBytes = 1024;

struct Message {
  // The connection it arrived on: Send to it replies to the sender. Peers
  // that connected to us appear here without a Connect of ours; failures
  // are reported for peers we connected to (see on_peer_failure).
  PeerId from = 0;
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};

using ReceiveHandler = std::function<void(Message message)>;
// A peer we connected to failed or went away; later sends to it fail.
using PeerFailureHandler = std::function<void(PeerId peer, const absl::Status& reason)>;
// OK once the payload has been handed over (the buffer may be reused), else
// why the message was not delivered.
using SendCallback = std::function<void(const absl::Status& status)>;

struct TransportHandlers {
  ReceiveHandler on_receive;           // required
  PeerFailureHandler on_peer_failure;  // optional
};

class Transport {
 public:
  virtual ~Transport() = default;

  // What a peer passes to Connect to reach this transport (opaque bytes).
  virtual std::string address() const = 0;

  // Connects to the transport whose address() is `address`. Connecting twice
  // to the same address yields two peers. InvalidArgument on a malformed
  // address; Unavailable when it cannot be reached.
  virtual absl::StatusOr<PeerId> Connect(absl::string_view address) = 0;

  // Queues header + payload to `peer`; `done` runs exactly once. Fails
  // synchronously (done not called) on an unknown or failed peer
  // (NotFound / Unavailable) or a header over kMaxHeaderBytes.
  virtual absl::Status Send(PeerId peer, absl::Span<const uint8_t> header,
                            absl::Span<const uint8_t> payload, SendCallback done) = 0;

  // Closes the connection; pending sends to it complete with Cancelled.
  virtual void Disconnect(PeerId peer) = 0;

  // "ucx" or "inproc", plus details for logs.
  virtual std::string name() const = 0;
};

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_TRANSPORT_H_
