#include "common/daemon/shutdown.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <ctime>

#include "absl/time/clock.h"

namespace gift::daemon {
namespace {

// The thread that waits for the signals (the SignalWaiter's creator).
std::atomic<pthread_t> waiter_thread{};

// Runs only in a thread that does not block the signals: one a shared
// library started before main (OpenBLAS starts its pool from its
// constructor). Hands the signal to the waiting thread, where it stays
// pending until Wait/WaitFor takes it. pthread_kill is async-signal-safe.
void ForwardToWaiter(int signal) { pthread_kill(waiter_thread.load(), signal); }

}  // namespace

SignalWaiter::SignalWaiter() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  waiter_thread.store(pthread_self());
  struct sigaction forward = {};
  forward.sa_handler = ForwardToWaiter;
  forward.sa_flags = SA_RESTART;
  sigfillset(&forward.sa_mask);
  sigaction(SIGTERM, &forward, nullptr);
  sigaction(SIGINT, &forward, nullptr);
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
