#include "tests/testing/test_cluster.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace gift::test {

tools::LocalClusterOptions ShortLeaseOptions(int servers, int workers) {
  tools::LocalClusterOptions options;
  options.servers = servers;
  options.workers = workers;
  options.lease_ttl = absl::Seconds(2);
  options.step_timeout = absl::Seconds(60);
  return options;
}

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(tools::LocalClusterOptions options,
                                                                absl::string_view build_dir) {
  auto dir = CreateTempDir("gift-test-cluster");
  if (!dir.ok()) return dir.status();
  std::unique_ptr<TestCluster> c(new TestCluster(*std::move(dir)));
  options.dir = c->dir_.path();
  options.binaries = tools::LocalClusterBinaries::InBuildTree(build_dir);
  auto cluster = tools::LocalCluster::Start(std::move(options));
  if (!cluster.ok()) return cluster.status();
  c->cluster_ = *std::move(cluster);
  return c;
}

std::string TestCluster::Logs(size_t max_bytes) const {
  const tools::LocalClusterOptions& options = cluster_->options();
  const size_t parts = 1 + options.workers + options.servers;
  const size_t each = std::max<size_t>(max_bytes / parts, 1);
  auto tail = [each](const std::string& text) {
    return text.size() > each ? text.substr(text.size() - each) : text;
  };
  std::string all = "--- coordinator\n";
  if (tools::CoordinatorProcess* coordinator = cluster_->coordinator(); coordinator != nullptr) {
    all += tail(coordinator->log());
  }
  for (int w = 0; w < options.workers; ++w) {
    absl::StrAppend(&all, "--- worker ", w, "\n", tail(cluster_->worker(w)->stderr_text()));
  }
  for (int s = 0; s < options.servers; ++s) {
    absl::StrAppend(&all, "--- server ", s, "\n", tail(cluster_->server(s)->stderr_text()));
  }
  return all;
}

}  // namespace gift::test
