#include "tools/giftctl/connection_flags.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

absl::Status CheckDialTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:")) {
    if (target.size() == 5) return absl::InvalidArgumentError("'unix:' names no socket path");
    return absl::OkStatus();
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", target, "' has no port: give HOST:PORT (e.g. localhost:7070)"));
  }
  const absl::string_view host = target.substr(0, colon);
  const absl::string_view port_text = target.substr(colon + 1);
  if (host.empty() || host == "[]") {
    return absl::InvalidArgumentError(absl::StrCat("'", target, "' has no host: give HOST:PORT"));
  }
  uint32_t port = 0;
  const bool digits =
      !port_text.empty() && port_text.size() <= 5 &&
      std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", target, "': the port '", port_text, "' is not a number in 1-65535"));
  }
  return absl::OkStatus();
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
