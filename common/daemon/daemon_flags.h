// Command lines of the GIFT-PS daemons: the flags every daemon shares
// (`--config FILE`), the exit codes of the daemon contract, and the duration
// syntax of flags such as --lease-ttl and --drain-timeout.
//
//   CLI::App app("gift-server: ...");
//   app.add_option("--listen", listen, "...")->capture_default_str();
//   if (std::optional<int> exit = ParseDaemonFlags(app, argc, argv, "gift-server")) {
//     return *exit;  // --help (0) or a usage error (64), already reported
//   }
//
// The config file is TOML (CLI11's dialect): one `key = value` line per flag,
// the key being the flag's long name without the dashes (`listen =
// "0.0.0.0:7071"`, `drain-timeout = "30s"`, `threads = 4`). Unknown keys are
// errors. Flags given on the command line override the file.
//
// Thread safety: plain functions; ParseDaemonFlags mutates `app` (call it once,
// from main, before any thread starts).
#ifndef GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_
#define GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_

#include <optional>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

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

// "10s", "500ms", "1m30s", or a plain number of seconds ("2.5"). Negative
// durations are accepted here; callers check their own range.
// INVALID_ARGUMENT for anything else.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text);

// Checks "HOST:PORT" (a non-empty host, a port 0..65535; "[::1]:0" is fine).
// INVALID_ARGUMENT naming the text otherwise.
absl::Status CheckHostPort(absl::string_view text);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_DAEMON_FLAGS_H_
