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
// (zero-copy on RDMA, straight into a placed buffer), except over TCP only,
// where every payload goes eagerly (see UcxTransportOptions::rndv_thresh).
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

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"

namespace gift::transport {

struct UcxTransportOptions {
  // UCX transports to use, as UCX_TLS takes them ("tcp", "shm,self", ...);
  // empty: UCX's choice (the UCX_TLS environment variable, else all).
  std::string tls;
  // Payloads of at least this size go by UCX's rendezvous protocol (the
  // UCX_RNDV_THRESH syntax: "inf", "256k", "auto"). Empty: "inf" when TCP is
  // the only network transport (`tls`, else the UCX_TLS environment
  // variable, lists tcp and at most intra-host ones: "tcp", "tcp,sm,self"),
  // else UCX's choice. A UCX_RNDV_THRESH environment variable
  // wins over both.
  //
  // Why eager over TCP: a rendezvous send waits for the receiver's
  // ready-to-receive message, which travels the TCP stream the receiver
  // uses to send to this peer, behind every byte already queued there. A
  // server's results to a worker then start only once that worker's
  // pushes have drained, so pushes and pulls run one after the other
  // (measured in scripts/netlab.sh at 200 Mbit/s: 1401 ms a step with
  // rendezvous, 1188 ms eager, link ideal 1037 ms). Eager costs one copy
  // on receipt (UCX assembles the message, Place copies it).
  std::string rndv_thresh;
};

// The rendezvous threshold CreateUcxTransport sets for `options` (see
// UcxTransportOptions::rndv_thresh): "" when UCX's setting is kept.
// `getenv` reads the environment (std::getenv in production).
std::string EffectiveRndvThresh(const UcxTransportOptions& options,
                                const std::function<const char*(const char*)>& getenv);

// Fails (Internal, with UCX's message) when UCX cannot be initialized or
// rejects an option, and (InvalidArgument) without an on_receive handler.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(
    TransportHandlers handlers, const UcxTransportOptions& options = {});

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
