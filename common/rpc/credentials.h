// Transport security of every GIFT-PS gRPC endpoint: mutual TLS from three PEM
// files, the peer's role from its certificate, and the rule that plaintext is
// for loopback only.
//
//   TlsFiles tls{.cert = "/etc/gift/tls/tls.crt", .key = ".../tls.key", .ca = ".../ca.crt"};
//   auto creds = MakeServerCredentials(tls);          // mTLS, client cert required
//   builder.AddListeningPort(listen, *creds);
//   auto channel_creds = MakeChannelCredentials(tls);  // presents tls.cert to the server
//
// With all three paths empty the endpoint is plaintext (loopback development);
// CheckPlaintextAllowed refuses that for a non-loopback address unless the
// operator said --insecure.
//
// Roles. A certificate names its role with a URI subject alternative name
// (SAN) `spiffe://gift/<role>` or `spiffe://gift/<role>/<anything>`, role one
// of worker, server, operator (e.g. `spiffe://gift/worker/host-3`). A
// certificate without such a URI has no role: it still completes the TLS
// handshake (it is signed by the cluster CA) but every role check refuses it.
// Servers verify the client's chain against --tls-ca; clients verify the
// server's chain and its host name (DNS or IP SAN) against the target.
//
// Thread safety: plain functions over their arguments.
#ifndef GIFT_COMMON_RPC_CREDENTIALS_H_
#define GIFT_COMMON_RPC_CREDENTIALS_H_

#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::rpc {

// PEM file paths of one endpoint: its certificate (chain), its private key, and
// the CA bundle its peers' certificates must chain to. All empty: plaintext.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;

  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

enum class Role { kWorker, kServer, kOperator };

// "worker", "server", "operator".
absl::string_view RoleName(Role role);

// The URI prefix of role SANs.
inline constexpr absl::string_view kRoleUriPrefix = "spiffe://gift/";

// Reads the three files. INVALID_ARGUMENT when only some paths are given
// (naming the missing flags `<flag_prefix>cert` etc.), NOT_FOUND /
// PERMISSION_DENIED naming the file that cannot be read, INVALID_ARGUMENT for
// a file with no PEM block. `flag_prefix` is "--tls-" for the daemons,
// "--" for giftctl.
struct TlsPem {
  std::string cert;
  std::string key;
  std::string ca;
};
absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files,
                                    absl::string_view flag_prefix = "--tls-");

// Plaintext when !files.enabled(); else TLS that requires and verifies a
// client certificate against files.ca. When `allowed` is not empty, every call
// from a peer whose role is not in it fails with PERMISSION_DENIED before it
// reaches a service (for endpoints whose RPCs all need the same roles, e.g.
// the worker's TCP Worker API). Errors as ReadTlsFiles.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, std::vector<Role> allowed = {},
    absl::string_view flag_prefix = "--tls-");

// Plaintext when !files.enabled(); else TLS presenting files.cert and trusting
// files.ca only (not the system roots). Errors as ReadTlsFiles.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, absl::string_view flag_prefix = "--tls-");

// True for targets that only this host can reach: "127.x.y.z:P", "[::1]:P",
// "localhost:P", and "unix:..." / "unix-abstract:..." (prefixes "ipv4:",
// "ipv6:", "dns:///" are looked through). 0.0.0.0, [::] and every other
// host are not loopback.
bool IsLoopback(absl::string_view address);

// OK when `files` enable TLS, when `address` is loopback, or when `insecure`
// (the operator's explicit --insecure). Otherwise INVALID_ARGUMENT:
//   "<what> <address> is not loopback: give --tls-cert, --tls-key and
//    --tls-ca, or --insecure to serve plaintext anyway"
// `what` says what the address is ("--listen", "--coordinator").
absl::Status CheckPlaintextAllowed(absl::string_view what, absl::string_view address,
                                   const TlsFiles& files, bool insecure);

// The role named by the peer's certificate; nullopt when the call is not over
// TLS or the certificate names no role (see the header comment).
std::optional<Role> PeerRole(const grpc::AuthContext& context);

// True when the call came over TLS (so the peer presented a verified
// certificate); false on a plaintext endpoint.
bool IsTlsPeer(const grpc::AuthContext& context);

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_CREDENTIALS_H_
