// A gift-coordinator daemon run as a child process, for integration tests
// and gift-bench: started on a loopback port chosen by the kernel, its
// address read from its `listening` log line.
//
//   CoordinatorProcessOptions options;
//   options.binary = GIFT_COORDINATOR_BIN;
//   options.state_file = dir + "/state.db";
//   options.extra_args = {"--lease-ttl", "1s"};
//   auto coordinator = CoordinatorProcess::Start(options);
//   auto channel = CoordinatorClient::MakeChannel((*coordinator)->address());
//
// Ownership: owns the child (killed with SIGKILL by the destructor if still
// running). Thread safety: as Subprocess.
#ifndef GIFT_TOOLS_GIFT_CLUSTER_COORDINATOR_PROCESS_H_
#define GIFT_TOOLS_GIFT_CLUSTER_COORDINATOR_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::tools {

struct CoordinatorProcessOptions {
  std::string binary;      // path of gift-coordinator
  std::string state_file;  // --state
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> extra_args;
  // Prepended to the command line (e.g. {"/usr/sbin/ip", "netns", "exec",
  // NS}); it must exec the daemon in place. Empty: run `binary` directly.
  std::vector<std::string> prefix;
  absl::Duration startup_timeout = absl::Seconds(20);
  SubprocessOptions subprocess;  // log file, parent-death signal
};

class CoordinatorProcess {
 public:
  // Starts the daemon and waits for its `listening` line. Fails with the
  // daemon's output in the message when it exits or stays silent.
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const CoordinatorProcessOptions& options);

  // The address it serves, from its log ("127.0.0.1:40123").
  const std::string& address() const { return address_; }
  pid_t pid() const { return process_->pid(); }

  // SIGKILL, then reaps it.
  absl::Status Kill();
  // SIGTERM and waits up to `grace` for a clean exit; fails when it does not
  // exit in time (it is then killed) or exits (or had exited) with a nonzero
  // code.
  absl::Status Stop(absl::Duration grace = absl::Seconds(10));

  // Everything it logged so far (stderr) and printed (stdout).
  std::string log() const { return process_->stderr_text() + process_->stdout_text(); }
  // Subprocess::WaitForLine: its output reaches log() through a pipe, after
  // what the daemon did is visible to its clients.
  absl::StatusOr<std::string> WaitForLine(const std::function<bool(const std::string&)>& predicate,
                                          absl::Duration timeout) {
    return process_->WaitForLine(predicate, timeout);
  }

 private:
  CoordinatorProcess(std::unique_ptr<Subprocess> process, std::string address)
      : process_(std::move(process)), address_(std::move(address)) {}

  std::unique_ptr<Subprocess> process_;
  std::string address_;
};

}  // namespace gift::tools

#endif  // GIFT_TOOLS_GIFT_CLUSTER_COORDINATOR_PROCESS_H_
