// A gift-server daemon (one aggregator shard) run as a child process on
// loopback for integration tests, and the wait for it to serve an epoch.
//
//   auto server = test::StartServerProcess(
//       {.binary = GIFT_SERVER_BIN, .coordinator = address, .name = "shard-0"});
//   ASSERT_TRUE(server.ok()) << server.status();
//   ASSERT_TRUE(test::WaitForServing(**server, epoch).ok()) << (*server)->stderr_text();
//
// Ownership: the caller owns the returned tools::Subprocess, whose
// destructor kills the daemon by its PID (SIGKILL) if it still runs and
// reaps it; a clean stop is Signal(SIGTERM) + WaitForExit. Thread safety: as
// Subprocess.
#ifndef GIFT_TESTS_TESTING_SERVER_PROCESS_H_
#define GIFT_TESTS_TESTING_SERVER_PROCESS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::test {

struct ServerProcessOptions {
  std::string binary;       // path of gift-server
  std::string coordinator;  // --coordinator HOST:PORT
  std::string name;         // --name
  int threads = 1;          // --threads
  std::vector<std::string> extra_args;
};

// Starts the daemon; it joins the coordinator in the background. Fails as
// Subprocess::Start.
absl::StatusOr<std::unique_ptr<tools::Subprocess>> StartServerProcess(
    const ServerProcessOptions& options);

// Waits for the server's `serving` event of `epoch` (with `chunks` chunks
// when given). The WaitForLine status on failure.
absl::Status WaitForServing(tools::Subprocess& server, uint64_t epoch,
                            std::optional<int> chunks = std::nullopt,
                            absl::Duration timeout = absl::Seconds(30));

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_SERVER_PROCESS_H_
