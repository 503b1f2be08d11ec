// The daemons' side of systemd's Type=notify protocol (sd_notify(3)):
// READY=1 once the daemon serves, STATUS= lines, STOPPING=1 when it begins
// to drain, and WATCHDOG=1 keep-alives when the unit sets WatchdogSec=.
//
//   NotifyReady("serving on 0.0.0.0:7070");     // ports bound, joined
//   Watchdog watchdog([&] { return main_loop_alive(); });
//   ... SIGTERM ...
//   NotifyStopping();
//
// Without NOTIFY_SOCKET in the environment (not started by systemd, or a
// unit of another type) every call does nothing. The environment is left as
// it is (children started by the daemon would inherit NOTIFY_SOCKET; the
// daemons start none).
//
// Thread safety: the functions may be called from any thread. A Watchdog is
// owned by one thread (create and destroy it there).
#ifndef GIFT_COMMON_DAEMON_SYSTEMD_NOTIFY_H_
#define GIFT_COMMON_DAEMON_SYSTEMD_NOTIFY_H_

#include <functional>
#include <thread>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace gift::daemon {

// "READY=1" plus "STATUS=<status>" when status is not empty.
void NotifyReady(absl::string_view status = "");
// "STOPPING=1" plus an optional status.
void NotifyStopping(absl::string_view status = "");
// "STATUS=<text>" (shown by systemctl status).
void NotifyStatus(absl::string_view text);

// Pings "WATCHDOG=1" every half of the interval systemd asks for
// (sd_watchdog_enabled: WATCHDOG_USEC, for this process), from its own thread,
// until destroyed. `healthy`, when given, is asked before every ping; while it
// returns false no ping is sent, so a wedged daemon is restarted by systemd.
// It runs on the watchdog thread and must be thread-safe. Without a watchdog
// interval the object starts no thread.
class Watchdog {
 public:
  explicit Watchdog(std::function<bool()> healthy = nullptr);
  ~Watchdog();

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The interval systemd expects pings within; zero when disabled.
  absl::Duration interval() const { return interval_; }

 private:
  const std::function<bool()> healthy_;
  absl::Duration interval_ = absl::ZeroDuration();
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_SYSTEMD_NOTIFY_H_
