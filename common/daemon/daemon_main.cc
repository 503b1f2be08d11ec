#include "common/daemon/daemon_main.h"

#include <unistd.h>

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/systemd_notify.h"

namespace gift::daemon {

using logging::Level;
using logging::Log;

DaemonMain::DaemonMain(absl::string_view name) : name_(name) {}

std::optional<int> DaemonMain::ParseFlags(CLI::App& app, int argc, char** argv) {
  if (std::optional<int> exit = ParseDaemonFlags(app, argc, argv, name_)) return exit;
  logging::SetDaemonName(name_);
  return std::nullopt;
}

int DaemonMain::UsageError(absl::string_view message) const {
  return daemon::UsageError(name_, message);
}

std::optional<int> DaemonMain::CheckAddressFlag(absl::string_view flag, absl::string_view value,
                                                bool empty_disables) const {
  if (value.empty() && empty_disables) return std::nullopt;
  if (absl::Status s = CheckHostPort(value); !s.ok()) {
    return UsageError(absl::StrCat(flag, ": ", s.message()));
  }
  return std::nullopt;
}

int DaemonMain::Fail(absl::string_view message) const {
  Log(Level::kError, "startup_failed", {{"error", message}});
  std::fprintf(stderr, "%s: %.*s\n", name_.c_str(), static_cast<int>(message.size()),
               message.data());
  return kExitFailure;
}

void DaemonMain::AnnounceShutdown(int signal, absl::string_view status) const {
  if (signal != 0) {
    Log(Level::kInfo, "shutting_down", {{"signal", SignalName(signal)}});
  } else {
    Log(Level::kInfo, "shutting_down", {{"reason", "drain requested"}});
  }
  NotifyStopping(status);
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string DefaultMemberName(absl::string_view kind) {
  return absl::StrCat(HostName(), "/", kind, "-", getpid());
}

}  // namespace gift::daemon
