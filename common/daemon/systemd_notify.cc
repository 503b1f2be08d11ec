#include "common/daemon/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace gift::daemon {
namespace {

using gift::logging::Level;
using gift::logging::Log;

void Send(const std::string& state) {
  // unset_environment = 0: later notifications (STOPPING, WATCHDOG) need it.
  const int r = sd_notify(0, state.c_str());
  if (r < 0) Log(Level::kWarning, "sd_notify_failed", {{"state", state}, {"errno", -r}});
}

std::string WithStatus(absl::string_view head, absl::string_view status) {
  return status.empty() ? std::string(head) : absl::StrCat(head, "\nSTATUS=", status);
}

}  // namespace

void NotifyReady(absl::string_view status) { Send(WithStatus("READY=1", status)); }
void NotifyStopping(absl::string_view status) { Send(WithStatus("STOPPING=1", status)); }
void NotifyStatus(absl::string_view text) { Send(absl::StrCat("STATUS=", text)); }

Watchdog::Watchdog(std::function<bool()> healthy) : healthy_(std::move(healthy)) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return;
  interval_ = absl::Microseconds(static_cast<int64_t>(usec));
  Log(Level::kInfo, "watchdog_enabled", {{"interval_ms", absl::ToInt64Milliseconds(interval_)}});
  thread_ = std::thread([this] {
    const absl::Duration period = interval_ / 2;
    bool vetoed = false;
    do {
      const bool ok = healthy_ == nullptr || healthy_();
      if (ok) {
        Send("WATCHDOG=1");
      } else if (!vetoed) {
        Log(Level::kError, "watchdog_withheld", {{"reason", "daemon reported unhealthy"}});
      }
      vetoed = !ok;
    } while (!stop_.WaitForNotificationWithTimeout(period));
  });
}

Watchdog::~Watchdog() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gift::daemon
