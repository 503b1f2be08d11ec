// The start and the end that every GIFT-PS daemon's main shares: the signal
// waiter, the flag parse, the usage and startup failures with their exit
// codes, the member name, and the shutdown announcement.
//
//   int Main(int argc, char** argv) {
//     daemon::DaemonMain daemon("gift-server");  // the FIRST statement of main
//     CLI::App app("gift-server: ...");
//     ... app.add_option(...) ...
//     if (std::optional<int> exit = daemon.ParseFlags(app, argc, argv)) return *exit;
//     if (std::optional<int> exit = daemon.CheckAddressFlag("--listen", listen)) return *exit;
//     auto shard = AggregatorShard::Create(...);
//     if (!shard.ok()) return daemon.Fail(shard.status().ToString());
//     ... serve ...
//     const int signal = daemon.signals().Wait();
//     daemon.AnnounceShutdown(signal, "draining");
//     ... drain, leave ...
//     return daemon::kExitOk;
//   }
//
// Why first: the constructor creates the process's SignalWaiter
// (common/daemon/shutdown.h), which blocks SIGTERM and SIGINT in the calling
// thread. Threads inherit the mask of the thread that starts them, and gRPC
// starts its executor and timer threads as soon as the first credentials or
// channel are made (ParseFlags does not make any; MakeDaemonCredentials
// does). A thread started before the waiter runs with the signals unblocked,
// so the kernel may deliver SIGTERM there and kill the process (exit 143)
// instead of starting the drain. daemon_process_test checks that every daemon
// catches the signals (SigCgt in /proc/PID/status).
//
// Ownership: owns the SignalWaiter (one per process, so one DaemonMain per
// process). Thread safety: use it from main's thread only.
#ifndef GIFT_COMMON_DAEMON_DAEMON_MAIN_H_
#define GIFT_COMMON_DAEMON_DAEMON_MAIN_H_

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"
#include "common/daemon/shutdown.h"

namespace gift::daemon {

class DaemonMain {
 public:
  // `name` ("gift-server") prefixes every diagnostic and names the daemon in
  // the JSON log (from ParseFlags on).
  explicit DaemonMain(absl::string_view name);

  DaemonMain(const DaemonMain&) = delete;
  DaemonMain& operator=(const DaemonMain&) = delete;

  const std::string& name() const { return name_; }
  SignalWaiter& signals() { return signals_; }

  // ParseDaemonFlags (common/daemon/daemon_flags.h: --config, --help, usage
  // errors). On success sets the log's daemon name and returns nullopt (go
  // on); otherwise the exit code, already reported.
  std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv);

  // Reports "<name>: <message>" as a usage error and returns kExitUsage.
  int UsageError(absl::string_view message) const;

  // nullopt when `value` is HOST:PORT (CheckHostPort), or empty and
  // `empty_disables`; otherwise the usage error "<flag>: <why>" is reported
  // and kExitUsage returned.
  std::optional<int> CheckAddressFlag(absl::string_view flag, absl::string_view value,
                                      bool empty_disables = false) const;

  // A failure at startup (a port, a file, a peer, UCX): logs `startup_failed`
  // {error}, writes "<name>: <message>" to stderr, returns kExitFailure.
  int Fail(absl::string_view message) const;

  // The start of the shutdown: logs `shutting_down` {signal: "SIGTERM"} (or
  // {reason: "drain requested"} for signal 0, a stop the daemon decided
  // itself) and tells systemd STOPPING=1 with `status`.
  void AnnounceShutdown(int signal, absl::string_view status) const;

 private:
  SignalWaiter signals_;  // first member: constructed before anything else
  const std::string name_;
};

// This host's name (gethostname): e.g. the worker's default --node.
std::string HostName();

// "<hostname>/<kind>-<pid>" ("node-3/server-4711"): the default member name,
// unique among the live members of one host.
std::string DefaultMemberName(absl::string_view kind);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_DAEMON_MAIN_H_
