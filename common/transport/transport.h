// The data-plane transport: reliable, ordered-per-peer messages of a small
// header plus a payload of any size between processes. One interface, one
// folder per implementation (as in Gloo):
//
//   ucx/     UCX active messages (ucx_transport.h): RDMA where the host has
//            it, else TCP (see there: no shared memory with peer-failure
//            detection on); rendezvous for large payloads;
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
// unchanged until the send callback runs. A received Message owns its bytes,
// unless the receiver's PayloadPlacer gave the transport a buffer of its own
// to land them in (zero-copy receive into preallocated slots; see below).
//
// Memory registration: a long-lived buffer that sends leave from or placed
// receives land in can be registered (RegisterMemory) so a transport that
// does zero-copy RDMA pins it once instead of per message.
#ifndef GIFT_COMMON_TRANSPORT_TRANSPORT_H_
#define GIFT_COMMON_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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
  // The payload's bytes when the transport allocated them (empty when the
  // payload was placed).
  std::vector<uint8_t> payload;
  // The receiver's own buffer the payload was placed in (PayloadPlacer), or
  // empty.
  absl::Span<uint8_t> placed;

  // The payload, wherever it landed.
  absl::Span<const uint8_t> bytes() const {
    return placed.data() != nullptr ? absl::Span<const uint8_t>(placed)
                                    : absl::Span<const uint8_t>(payload);
  }
};

using ReceiveHandler = std::function<void(Message message)>;
// A peer we connected to failed or went away; later sends to it fail.
using PeerFailureHandler = std::function<void(PeerId peer, const absl::Status& reason)>;
// OK once the payload has been handed over (the buffer may be reused), else
// why the message was not delivered.
using SendCallback = std::function<void(const absl::Status& status)>;

// Chooses where the payload of an arriving message lands. Called on the
// progress thread, once per message, with its header and payload size,
// before the payload is copied or fetched. Returns a buffer of exactly
// `payload_bytes` bytes that the receiver owns, or an empty span to let the
// transport allocate (Message::payload). A buffer handed out must stay valid
// and unused by anyone else until on_receive runs with that message; when
// the transfer fails after placement (the sender died mid-rendezvous),
// on_receive is not called for it and the receiver gets the buffer back only
// by its own bookkeeping (e.g. a step or epoch that ends).
using PayloadPlacer = std::function<absl::Span<uint8_t>(
    PeerId from, absl::Span<const uint8_t> header, size_t payload_bytes)>;

struct TransportHandlers {
  ReceiveHandler on_receive;           // required
  PeerFailureHandler on_peer_failure;  // optional
  PayloadPlacer place_payload;         // optional: every payload allocated
};

// A buffer registered with a transport (RegisterMemory). Destroying it
// unregisters the buffer; it must be destroyed before the buffer is freed
// and before the transport, and not while a send from it or a placed
// receive into it is in flight.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
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

  // Registers `buffer` (host memory) for zero-copy sends from it and placed
  // receives into it; the transport looks registered regions up by address.
  // A transport without such a path returns a region that does nothing.
  // Internal with the transport's message when registration fails (the
  // caller may go on unregistered: it is an optimisation, never required).
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      absl::Span<uint8_t> buffer) {
    (void)buffer;
    return std::unique_ptr<MemoryRegion>(new MemoryRegion());
  }

  // Whether Send and RegisterMemory take CUDA device memory (UCX built with
  // its CUDA module, and a device). When false, device data must be staged
  // through host memory, which is what the worker does (and, today, also
  // when true: handing device memory to the transport is not built).
  virtual bool carries_cuda_memory() const { return false; }

  // "ucx" or "inproc", plus details for logs ("ucx (memory types: host)").
  virtual std::string name() const = 0;

  // Messages received so far, by how their payload came: in the message
  // (eager) or fetched from the sender's memory afterwards (rendezvous:
  // RDMA reads on verbs). Any thread. A transport without the distinction
  // counts everything eager.
  struct ReceiveCounts {
    uint64_t eager = 0;
    uint64_t rendezvous = 0;
  };
  virtual ReceiveCounts receive_counts() const { return {}; }
};

// Builds a transport with the handlers its owner gives it: what the worker's
// engine, the aggregator's shard and the peer failure reporter take (e.g.
// CreateUcxTransport, or CreateInprocTransport in tests).
using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(TransportHandlers handlers)>;

// An address for a message or a log: itself when it is printable text (the
// in-process transport's), else its size and a fingerprint (FNV-1a, 32 bits,
// the same in every process) instead of the opaque bytes of a UCX address:
// "a 231-byte address, fingerprint 8c1e04d2".
inline std::string DescribeAddress(absl::string_view address) {
  bool printable = !address.empty();
  uint32_t hash = 2166136261u;
  for (char c : address) {
    printable = printable && c >= 0x20 && c < 0x7f;
    hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  }
  if (printable) return std::string(address);
  return absl::StrCat("a ", address.size(), "-byte address, fingerprint ",
                      absl::Hex(hash, absl::kZeroPad8));
}

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_TRANSPORT_H_
