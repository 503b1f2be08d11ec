#include "tests/testing/test_cluster.h"

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
  std::string all;
  for (int w = 0; w < cluster_->options().workers; ++w) {
    all += absl::StrCat("--- worker ", w, "\n", cluster_->worker(w)->stderr_text());
  }
  for (int s = 0; s < cluster_->options().servers; ++s) {
    all += absl::StrCat("--- server ", s, "\n", cluster_->server(s)->stderr_text());
  }
  return all.size() > max_bytes ? all.substr(all.size() - max_bytes) : all;
}

}  // namespace gift::test
