// giftctl's connection flags: where the coordinator is, how long each call may
// take, and the operator's TLS identity.
//
//   --coordinator HOST:PORT   default $GIFT_COORDINATOR, else localhost:7070
//   --timeout DURATION        e.g. 2s, 500ms, 1m30s (default 10s)
//   --cert FILE --key FILE --ca FILE
//                             mutual TLS: the operator's certificate (role
//                             `operator`, URI SAN spiffe://gift/operator), its
//                             key, and the cluster CA (defaults
//                             $GIFT_TLS_CERT, $GIFT_TLS_KEY, $GIFT_TLS_CA)
//   --insecure                plaintext to a non-loopback coordinator
//
// Thread safety: plain functions; the flags are filled by CLI11 during parse.
#ifndef GIFT_TOOLS_GIFTCTL_CONNECTION_FLAGS_H_
#define GIFT_TOOLS_GIFTCTL_CONNECTION_FLAGS_H_

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rpc/credentials.h"

namespace gift::giftctl {

struct ConnectionFlags {
  std::string address;
  absl::Duration timeout = absl::Seconds(10);
  rpc::TlsFiles tls;
  bool insecure = false;
};

// Adds the flags to `app`; `flags` (pre-filled with the defaults, see
// DefaultConnectionFlags) must outlive the parse.
void AddConnectionFlags(CLI::App& app, ConnectionFlags* flags);

// `default_coordinator` as the address and the TLS files from $GIFT_TLS_CERT,
// $GIFT_TLS_KEY and $GIFT_TLS_CA when set.
ConnectionFlags DefaultConnectionFlags(const std::string& default_coordinator);

// Checks an address to dial: "HOST:PORT" with a non-empty host and a port in
// 1..65535 (written in digits; "[::1]:7070" is fine), or "unix:/path".
// INVALID_ARGUMENT naming the text and what is wrong otherwise.
absl::Status CheckDialTarget(absl::string_view target);

// A channel to `target` (the coordinator's address, or another daemon's gRPC
// endpoint for `giftctl health`): mutual TLS when files are given, plaintext
// to a loopback address or with --insecure; a Unix socket ("unix:/path") is
// always plaintext (its file mode guards it); `target` should have passed
// CheckDialTarget. INVALID_ARGUMENT (a usage error) for plaintext to another
// address, for an incomplete set of TLS flags, or for an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ConnectionFlags& flags,
                                                           const std::string& target);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_CONNECTION_FLAGS_H_
