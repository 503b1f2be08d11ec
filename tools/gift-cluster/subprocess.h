// A child process with its stdout and stderr captured, for tests and
// benchmarks that drive real daemons and CLIs (gift-coordinator, giftctl).
//
//   auto child = Subprocess::Start({"/path/to/giftctl", "status"});
//   absl::StatusOr<int> code = (*child)->WaitForExit(absl::Seconds(10));
//   std::string out = (*child)->stdout_text();
//
// Two threads drain the pipes as the child writes, so a chatty child never
// blocks on a full pipe. The destructor kills (SIGKILL) a child still running
// and reaps it.
//
// Ownership: owns the child and its pipes. Thread safety: all methods may be
// called concurrently, except the destructor.
#ifndef GIFT_TOOLS_GIFT_CLUSTER_SUBPROCESS_H_
#define GIFT_TOOLS_GIFT_CLUSTER_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gift::tools {

struct SubprocessOptions {
  // Also appends everything the child writes to this file ("": no file).
  std::string log_path;
  // A signal the child receives when the thread that started it exits (its
  // parent died): keeps a killed launcher from leaving daemons behind. 0:
  // none.
  int parent_death_signal = 0;
};

class Subprocess {
 public:
  // Runs argv[0] (a path; PATH is not searched) with the caller's
  // environment and an empty signal mask. Fails (INVALID_ARGUMENT) for an
  // empty argv, (INTERNAL) when pipes or fork fail, (the open error) when
  // the log file cannot be opened; a program that cannot be executed exits
  // with 127.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                           const SubprocessOptions& options = {});

  ~Subprocess();

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` unless the child has been reaped.
  absl::Status Signal(int signal);

  // Waits up to `timeout` for the child to exit and its output to be read;
  // returns its exit code, or 128 + the signal that ended it. DEADLINE_EXCEEDED
  // when it is still running.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);

  // Blocks until a complete line of stdout or stderr satisfies `predicate`
  // (lines seen before the call count too) and returns it. DEADLINE_EXCEEDED
  // after `timeout`, FAILED_PRECONDITION when the output ends first.
  absl::StatusOr<std::string> WaitForLine(const std::function<bool(const std::string&)>& predicate,
                                          absl::Duration timeout);

  std::string stdout_text() const;
  std::string stderr_text() const;

 private:
  Subprocess(pid_t pid, int stdout_fd, int stderr_fd, int log_fd);

  void Drain(int fd, bool is_stdout);
  // Reaps the child without blocking; true once it has exited.
  bool TryReap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const pid_t pid_;
  const int log_fd_;  // -1: none
  mutable absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  std::string stderr_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  int open_pipes_ ABSL_GUARDED_BY(mu_) = 2;
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mu_);
  std::thread stdout_reader_;
  std::thread stderr_reader_;
};

}  // namespace gift::tools

#endif  // GIFT_TOOLS_GIFT_CLUSTER_SUBPROCESS_H_
