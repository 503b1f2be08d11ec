// Shutdown signals and bounded waits for the daemons' drain.
//
//   int main(...) {
//     ... parse flags ...
//     SignalWaiter signals;            // before any thread starts
//     ... start serving ...
//     const int signal = signals.Wait();
//     Log(kInfo, "shutting_down", {{"signal", SignalName(signal)}});
//     NotifyStopping();
//     WaitUntil([&] { return shard->idle(); }, drain_timeout, &signals);
//
// Ownership: a SignalWaiter owns nothing; it blocks SIGTERM and SIGINT in the
// creating thread (threads started later inherit the mask) and leaves them
// blocked when destroyed. Threads that already run with them unblocked (a
// shared library's pool started before main, e.g. OpenBLAS's) get a handler
// that forwards the signal to the creating thread, so a signal never kills
// the process by its default action. One SignalWaiter per process. Thread
// safety: Wait/WaitFor only from the creating thread; each signal is
// returned once.
#ifndef GIFT_COMMON_DAEMON_SHUTDOWN_H_
#define GIFT_COMMON_DAEMON_SHUTDOWN_H_

#include <signal.h>

#include <functional>
#include <optional>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::daemon {

class SignalWaiter {
 public:
  SignalWaiter();

  // Blocks until SIGTERM or SIGINT arrives; returns it.
  int Wait();
  // Like Wait, for at most `timeout` (zero: only polls); nullopt when none came.
  std::optional<int> WaitFor(absl::Duration timeout);

 private:
  sigset_t signals_;
};

// "SIGTERM", "SIGINT", or "signal N".
absl::string_view SignalName(int signal);

// Polls `done` every `poll` until it returns true (true), `timeout` passes
// (false), or, when `signals` is given, another SIGTERM/SIGINT arrives
// (false: a second signal cuts the drain short).
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout,
               SignalWaiter* signals = nullptr, absl::Duration poll = absl::Milliseconds(20));

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_SHUTDOWN_H_
