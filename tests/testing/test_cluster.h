// A whole local cluster for integration tests: tools::LocalCluster (the
// gift-cluster launcher's library: a gift-coordinator, S gift-server and P
// gift-worker child processes on loopback, each waited for until it logs
// that it serves) started from the daemons of the build tree, in a private
// temp dir of its own.
//
//   tools::LocalClusterOptions options;
//   options.servers = 2;
//   options.workers = 4;
//   auto cluster = test::TestCluster::Start(options, GIFT_BUILD_DIR);
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   (*cluster)->cluster()->worker_socket(0);
//
// Ownership: the TestCluster owns the LocalCluster, which owns the
// processes: its destructor kills any still running by PID (SIGKILL) and
// reaps them; Stop() on cluster() is the clean SIGTERM shutdown. The temp
// dir (state, sockets, logs) is removed after the processes are gone.
// Thread safety: as LocalCluster (Start/Stop/KillWorker from one thread);
// Logs() may be called from any thread.
#ifndef GIFT_TESTS_TESTING_TEST_CLUSTER_H_
#define GIFT_TESTS_TESTING_TEST_CLUSTER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/temp_dir.h"
#include "tools/gift-cluster/local_cluster.h"

namespace gift::test {

// `servers` and `workers` with a 2 s lease (a killed worker is noticed
// quickly) and a 60 s step timeout: the integration tests' cluster.
tools::LocalClusterOptions ShortLeaseOptions(int servers, int workers);

class TestCluster {
 public:
  // Starts `options` with options.dir set to a fresh temp dir and
  // options.binaries to the daemons under `build_dir` (the CMake binary
  // dir). Fails as LocalCluster::Start (the error quotes the daemon's log).
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(tools::LocalClusterOptions options,
                                                            absl::string_view build_dir);

  tools::LocalCluster* cluster() const { return cluster_.get(); }

  // The coordinator's log, then the workers' and the servers' stderr, each
  // headed "--- coordinator" / "--- worker i" / "--- server i" and cut to
  // its last part of `max_bytes` (shared equally): for failure messages.
  std::string Logs(size_t max_bytes = 20000) const;

 private:
  explicit TestCluster(gift::TempDir dir) : dir_(std::move(dir)) {}

  gift::TempDir dir_;  // declared first: removed after the processes end
  std::unique_ptr<tools::LocalCluster> cluster_;
};

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_TEST_CLUSTER_H_
