#include "tools/gift-cluster/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::tools {

namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                              const SubprocessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess: empty argv");
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return Errno(absl::StrCat("open ", options.log_path));
  }
  const int death_signal = options.parent_death_signal;
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    if (log_fd >= 0) close(log_fd);
    return Errno("pipe2");
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    if (log_fd >= 0) close(log_fd);
    return Errno("pipe2");
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    if (log_fd >= 0) close(log_fd);
    return Errno("fork");
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, death_signal);
      if (getppid() != parent) _exit(127);  // the parent is already gone
    }
    // dup2 clears FD_CLOEXEC on the new descriptors.
    if (dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) _exit(127);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  return std::unique_ptr<Subprocess>(new Subprocess(pid, out[0], err[0], log_fd));
}

Subprocess::Subprocess(pid_t pid, int stdout_fd, int stderr_fd, int log_fd)
    : pid_(pid), log_fd_(log_fd) {
  stdout_reader_ = std::thread(&Subprocess::Drain, this, stdout_fd, true);
  stderr_reader_ = std::thread(&Subprocess::Drain, this, stderr_fd, false);
}

Subprocess::~Subprocess() {
  {
    absl::MutexLock lock(&mu_);
    if (!TryReap()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_code_ = 128 + SIGKILL;
    }
  }
  stdout_reader_.join();
  stderr_reader_.join();
  if (log_fd_ >= 0) close(log_fd_);
}

void Subprocess::Drain(int fd, bool is_stdout) {
  char buffer[4096];
  std::string partial;
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    absl::MutexLock lock(&mu_);
    if (n <= 0) {
      if (!partial.empty()) lines_.push_back(std::move(partial));
      --open_pipes_;
      break;
    }
    (is_stdout ? stdout_ : stderr_).append(buffer, n);
    if (log_fd_ >= 0) {
      // Best effort: a full disk must not stop the child's output draining.
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = write(log_fd_, buffer + done, n - done);
        if (w <= 0) break;
        done += w;
      }
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] == '\n') {
        lines_.push_back(std::move(partial));
        partial.clear();
      } else {
        partial.push_back(buffer[i]);
      }
    }
  }
  close(fd);
}

bool Subprocess::TryReap() {
  if (exit_code_.has_value()) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

absl::Status Subprocess::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  if (TryReap()) {
    return absl::FailedPreconditionError(absl::StrCat("process ", pid_, " has exited"));
  }
  if (kill(pid_, signal) != 0) return Errno(absl::StrCat("kill ", pid_));
  return absl::OkStatus();
}

absl::StatusOr<int> Subprocess::WaitForExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  // No notification for a child's exit: poll waitpid, and wait for the
  // readers to reach the end of the pipes.
  while (!TryReap() || open_pipes_ > 0) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    static constexpr bool kNever = false;
    mu_.AwaitWithTimeout(absl::Condition(&kNever), absl::Milliseconds(2));
  }
  return *exit_code_;
}

absl::StatusOr<std::string> Subprocess::WaitForLine(
    const std::function<bool(const std::string&)>& predicate, absl::Duration timeout) {
  size_t checked = 0;
  const std::string* found = nullptr;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (; checked < lines_.size(); ++checked) {
      if (predicate(lines_[checked])) {
        found = &lines_[checked];
        return true;
      }
    }
    return open_pipes_ == 0;
  };
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "process ", pid_, ": no matching output line within ", absl::FormatDuration(timeout)));
  }
  if (found == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", pid_, " closed its output without a matching line"));
  }
  return *found;
}

std::string Subprocess::stdout_text() const {
  absl::MutexLock lock(&mu_);
  return stdout_;
}

std::string Subprocess::stderr_text() const {
  absl::MutexLock lock(&mu_);
  return stderr_;
}

}  // namespace gift::tools
