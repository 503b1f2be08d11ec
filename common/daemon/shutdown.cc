#include "common/daemon/shutdown.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "absl/time/clock.h"

namespace gift::daemon {

SignalWaiter::SignalWaiter() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

int SignalWaiter::Wait() {
  int signal = 0;
  while (sigwait(&signals_, &signal) != 0) {
  }
  return signal;
}

std::optional<int> SignalWaiter::WaitFor(absl::Duration timeout) {
  if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
  const timespec ts = absl::ToTimespec(timeout);
  for (;;) {
    const int signal = sigtimedwait(&signals_, nullptr, &ts);
    if (signal > 0) return signal;
    if (errno != EINTR) return std::nullopt;  // EAGAIN: timed out
  }
}

absl::string_view SignalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout, SignalWaiter* signals,
               absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (done()) return true;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    const absl::Duration nap = std::min(poll, left);
    if (signals != nullptr) {
      if (signals->WaitFor(nap).has_value()) return false;
    } else {
      absl::SleepFor(nap);
    }
  }
}

}  // namespace gift::daemon
