// Command lines of the GIFT-PS daemons: the flags every daemon shares
// (`--config FILE`, the TLS flags), the exit codes of the daemon contract, and
// the one duration syntax of every duration flag (--lease-ttl, --drain-timeout,
// giftctl's --timeout, ...).
//
//   CLI::App app("gift-server: ...");
//   app.add_option("--listen", listen, "...")->capture_default_str();
//   if (std::optional<int> exit = ParseDaemonFlags(app, argc, argv, "gift-server")) {
//     return *exit;  // --help (0) or a usage error (64), already reported
//   }
//
// The config file is TOML (CLI11's dialect): one `key = value` line per flag,
// the key being the flag's long name without the dashes (`listen =
// "127.0.0.1:7071"`, `drain-timeout = "30s"`, `threads = 4`). Unknown keys are
// errors. Flags given on the command line override the file.
//
// Thread safety: plain functions; ParseDaemonFlags mutates `app` (call it once,
// from main, before any thread starts).
#ifndef GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_
#define GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rpc/credentials.h"

namespace gift::daemon {

// The daemons' exit codes (the daemon flag contract).
inline constexpr int kExitOk = 0;       // --help, or stopped by SIGTERM/SIGINT
inline constexpr int kExitFailure = 1;  // startup failed (ports, files, peers)
inline constexpr int kExitUsage = 64;   // bad flags or config (EX_USAGE)

// Adds `--config FILE` to `app` and parses argv. Returns std::nullopt when the
// daemon should go on, otherwise the code main should exit with: 0 after
// printing --help, kExitUsage after writing
//   "<daemon_name>: <message>\nRun with --help for usage.\n"
// to stderr (bad flag, bad value, unknown config key, missing or unreadable
// config file). Never throws.
std::optional<int> ParseDaemonFlags(CLI::App& app, int argc, char** argv,
                                    absl::string_view daemon_name);

// Writes the same two-line usage error for a check main does itself (e.g. a
// flag that must be HOST:PORT) and returns kExitUsage.
int UsageError(absl::string_view daemon_name, absl::string_view message);

// "10s", "500ms", "1m30s", "1h", or a plain number of seconds ("2.5").
// Negative durations are accepted here; callers check their own range (or use
// AddDurationOption). INVALID_ARGUMENT, quoting `text` (never a converted
// number), for anything else and for magnitudes of 100000 hours or more.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text);

enum class DurationRange { kPositive, kNonNegative };

// Adds a duration option `name` (e.g. "--lease-ttl") that stores into
// `*value` (whose current value is the shown default) and, as a config key,
// takes the same text. A bad value is a CLI11 ValidationError, so
// ParseDaemonFlags reports it as a usage error (exit 64):
//   "--lease-ttl: 'soon' is not a duration (e.g. 2s, 500ms, 1m30s)"
//   "--lease-ttl: must be positive, got '0s'"
// `value` must outlive the parse.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, absl::Duration* value,
                               const std::string& help,
                               DurationRange range = DurationRange::kPositive);

// The flags of a cluster member (gift-server, gift-worker): the coordinator
// to join, the member name, the UCX transports.
struct MemberFlags {
  std::string coordinator = "localhost:7070";
  std::string name;  // the default shown in --help (e.g. DefaultMemberName)
  std::string ucx_tls;
};

// Adds --coordinator, --name and --ucx-tls to `app`, their current values
// shown as defaults. `flags` must outlive the parse.
void AddMemberFlags(CLI::App& app, MemberFlags* flags);

// Adds --metrics-listen HOST:PORT (the Prometheus endpoint, "" disables, port
// 0 picks one), the current value shown as default. `listen` must outlive the
// parse.
void AddMetricsListenFlag(CLI::App& app, std::string* listen);

// Transport security of a daemon's gRPC endpoints and of its channels to other
// daemons (common/rpc/credentials.h).
struct TlsFlags {
  rpc::TlsFiles files;
  bool insecure = false;  // plaintext allowed on non-loopback addresses
};

// Adds --tls-cert, --tls-key, --tls-ca (PEM paths; config keys tls-cert,
// tls-key, tls-ca) and --insecure to `app`. `flags` must outlive the parse.
void AddTlsFlags(CLI::App& app, TlsFlags* flags);

// What a daemon's gRPC endpoints and its channels to other daemons use.
struct DaemonCredentials {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> channel;
};

// The credentials from `tls`, after the plaintext rule
// (rpc::CheckPlaintextAllowed) for every (flag, address) in `addresses` (empty
// addresses are skipped). `server_roles` as rpc::MakeServerCredentials's
// `allowed`. INVALID_ARGUMENT with the message main reports as a usage error.
absl::StatusOr<DaemonCredentials> MakeDaemonCredentials(
    const TlsFlags& tls,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>> addresses,
    std::vector<rpc::Role> server_roles = {});

// Checks "HOST:PORT" (a non-empty host, a port 0..65535; "[::1]:0" is fine).
// INVALID_ARGUMENT naming the text otherwise.
absl::Status CheckHostPort(absl::string_view text);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_
