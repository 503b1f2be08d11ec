#include "tools/giftctl/connection_flags.h"

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "common/control/coordinator_client.h"
#include "common/daemon/daemon_flags.h"

namespace gift::giftctl {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

ConnectionFlags DefaultConnectionFlags(const std::string& default_coordinator) {
  ConnectionFlags flags;
  flags.address = default_coordinator;
  flags.tls.cert = Env("GIFT_TLS_CERT");
  flags.tls.key = Env("GIFT_TLS_KEY");
  flags.tls.ca = Env("GIFT_TLS_CA");
  return flags;
}

void AddConnectionFlags(CLI::App& app, ConnectionFlags* flags) {
  app.add_option("--coordinator", flags->address,
                 "coordinator address HOST:PORT (default: $GIFT_COORDINATOR, else "
                 "localhost:7070)")
      ->capture_default_str();
  daemon::AddDurationOption(app, "--timeout", &flags->timeout,
                            "deadline of each call, e.g. 2s, 500ms or 1m30s");
  app.add_option("--cert", flags->tls.cert,
                 "PEM certificate of the operator (mutual TLS; default $GIFT_TLS_CERT)")
      ->type_name("FILE");
  app.add_option("--key", flags->tls.key, "PEM private key of --cert (default $GIFT_TLS_KEY)")
      ->type_name("FILE");
  app.add_option("--ca", flags->tls.ca,
                 "PEM CA bundle the coordinator's certificate must chain to (default "
                 "$GIFT_TLS_CA)")
      ->type_name("FILE");
  app.add_flag("--insecure", flags->insecure,
               "allow plaintext to a coordinator that is not on loopback");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ConnectionFlags& flags,
                                                           const std::string& target) {
  const bool unix_socket = target.rfind("unix:", 0) == 0;
  if (!unix_socket && !flags.tls.enabled() && !flags.insecure && !rpc::IsLoopback(target)) {
    return absl::InvalidArgumentError(
        target + " is not loopback: give --cert, --key and --ca for mutual TLS, or --insecure " +
        "to use plaintext anyway");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      rpc::MakeChannelCredentials(unix_socket ? rpc::TlsFiles{} : flags.tls, "--");
  if (!credentials.ok()) return credentials.status();
  return control::CoordinatorClient::MakeChannel(target, *std::move(credentials));
}

}  // namespace gift::giftctl
