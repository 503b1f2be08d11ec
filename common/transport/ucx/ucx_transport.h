// The UCX implementation of Transport (transport.h): UCP active messages on
// one UCP worker driven by a progress thread.
//
// UCX chooses the wire among the transports that can report a peer's failure
// (the usual UCX_TLS / UCX_NET_DEVICES environment variables narrow the
// choice): RDMA where the host has it, else TCP. Endpoints use error-handling
// mode PEER, so a peer that dies is reported through on_peer_failure and sends
// to it fail instead of hanging; UCX 1.13's shared-memory transports (posix,
// sysv, cma) have no peer-failure handler and are excluded by that mode, so
// processes of one host talk over loopback TCP (measured: a "sm,self" UCX_TLS
// finds no transport). Large payloads go by UCX's rendezvous protocol
// (zero-copy on RDMA, straight into a placed buffer).
//
// Addresses are the UCP worker address wrapped in a checked envelope (magic,
// length, CRC-32C), so a corrupt or foreign address given to Connect is an
// InvalidArgument, never undefined behaviour inside UCX.
//
// Connect waits for the progress thread: do not call it from this
// transport's own callbacks. Destruction stops the progress thread, closes
// every endpoint (pending sends complete with an error status) and releases
// UCX; it must not run on the progress thread either.
#ifndef GIFT_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define GIFT_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"

namespace gift::transport {

struct UcxTransportOptions {
  // UCX transports to use, as UCX_TLS takes them ("tcp", "shm,self", ...);
  // empty: UCX's choice (the UCX_TLS environment variable, else all).
  std::string tls;
};

// Fails (Internal, with UCX's message) when UCX cannot be initialized or
// rejects an option, and (InvalidArgument) without an on_receive handler.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(
    TransportHandlers handlers, const UcxTransportOptions& options = {});

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
