#include "common/daemon/daemon_flags.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gift::daemon {
namespace {

constexpr absl::string_view kUnknownKeyPrefix = "INI was not able to parse ";
constexpr absl::Duration kMaxDuration = absl::Hours(100000);

}  // namespace

int UsageError(absl::string_view daemon_name, absl::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\nRun with --help for usage.\n",
               static_cast<int>(daemon_name.size()), daemon_name.data(),
               static_cast<int>(message.size()), message.data());
  return kExitUsage;
}

std::optional<int> ParseDaemonFlags(CLI::App& app, int argc, char** argv,
                                    absl::string_view daemon_name) {
  CLI::Option* config =
      app.set_config("--config", "",
                     "TOML config file: one `key = value` per flag, keyed by the flag's long "
                     "name (e.g. listen = \"127.0.0.1:7070\"); flags on the command line win",
                     /*config_required=*/false);
  config->type_name("FILE");
  app.allow_config_extras(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConfigError& e) {
    std::string file = config->count() > 0 ? config->as<std::string>() : "";
    absl::string_view what = e.what();
    if (absl::ConsumePrefix(&what, kUnknownKeyPrefix)) {
      return UsageError(daemon_name, absl::StrCat("--config ", file, ": unknown key '", what, "'"));
    }
    return UsageError(daemon_name, absl::StrCat("--config ", file, ": ", e.what()));
  } catch (const CLI::FileError& e) {
    return UsageError(daemon_name, absl::StrCat("--config: ", e.what()));
  } catch (const CLI::ParseError& e) {
    return UsageError(daemon_name, e.what());
  } catch (const std::exception& e) {  // CLI11 may throw others from validators
    return UsageError(daemon_name, e.what());
  }
  return std::nullopt;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  absl::Duration d;
  bool parsed = false;
  double seconds = 0;
  if (absl::SimpleAtod(trimmed, &seconds)) {
    if (std::isfinite(seconds)) {
      d = std::abs(seconds) < absl::ToDoubleSeconds(kMaxDuration) ? absl::Seconds(seconds)
                                                                  : kMaxDuration;
      parsed = true;
    }
  } else {
    parsed = !trimmed.empty() && absl::ParseDuration(trimmed, &d);
  }
  if (parsed && absl::AbsDuration(d) < kMaxDuration) return d;
  if (parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is too long a duration (at most 99999h)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a duration (e.g. 2s, 500ms, 1m30s)"));
}

CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, absl::Duration* value,
                               const std::string& help, DurationRange range) {
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [name, value, range](const std::string& text) {
        absl::StatusOr<absl::Duration> d = ParseDurationFlag(text);
        if (!d.ok()) throw CLI::ValidationError(name, std::string(d.status().message()));
        if (range == DurationRange::kPositive && *d <= absl::ZeroDuration()) {
          throw CLI::ValidationError(name, absl::StrCat("must be positive, got '", text, "'"));
        }
        if (*d < absl::ZeroDuration()) {
          throw CLI::ValidationError(name, absl::StrCat("must not be negative, got '", text, "'"));
        }
        *value = *d;
      },
      help);
  option->type_name("DURATION");
  option->default_str(absl::FormatDuration(*value));
  return option;
}

void AddMemberFlags(CLI::App& app, MemberFlags* flags) {
  app.add_option("--coordinator", flags->coordinator, "the coordinator's HOST:PORT")
      ->capture_default_str();
  app.add_option("--name", flags->name, "member name, unique among live members")
      ->capture_default_str();
  app.add_option("--ucx-tls", flags->ucx_tls,
                 "UCX transports, as UCX_TLS takes them (default: UCX's choice)");
}

void AddMetricsListenFlag(CLI::App& app, std::string* listen) {
  app.add_option("--metrics-listen", *listen,
                 "HOST:PORT for Prometheus metrics at /metrics (\"\" disables; port 0 picks one)")
      ->capture_default_str();
}

void AddTlsFlags(CLI::App& app, TlsFlags* flags) {
  app.add_option("--tls-cert", flags->files.cert,
                 "PEM certificate (chain) of this daemon; with --tls-key and --tls-ca every "
                 "gRPC endpoint and channel uses mutual TLS")
      ->type_name("FILE");
  app.add_option("--tls-key", flags->files.key, "PEM private key of --tls-cert")->type_name("FILE");
  app.add_option("--tls-ca", flags->files.ca,
                 "PEM CA bundle that peers' certificates must chain to")
      ->type_name("FILE");
  app.add_flag("--insecure", flags->insecure,
               "allow plaintext gRPC on non-loopback addresses (without TLS flags, only "
               "loopback addresses are accepted)");
}

absl::StatusOr<DaemonCredentials> MakeDaemonCredentials(
    const TlsFlags& tls,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>> addresses,
    std::vector<rpc::Role> server_roles) {
  for (const auto& [flag, address] : addresses) {
    if (address.empty()) continue;
    if (absl::Status s = rpc::CheckPlaintextAllowed(flag, address, tls.files, tls.insecure);
        !s.ok()) {
      return s;
    }
  }
  DaemonCredentials credentials;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      rpc::MakeServerCredentials(tls.files, std::move(server_roles));
  if (!server.ok()) return absl::InvalidArgumentError(server.status().message());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel =
      rpc::MakeChannelCredentials(tls.files);
  if (!channel.ok()) return absl::InvalidArgumentError(channel.status().message());
  credentials.server = *std::move(server);
  credentials.channel = *std::move(channel);
  return credentials;
}

absl::Status CheckHostPort(absl::string_view text) {
  const size_t colon = text.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not HOST:PORT"));
  }
  return absl::OkStatus();
}

}  // namespace gift::daemon
