// ClusterPlacement parsing and the /proc/PID/net/dev reader that
// LocalCluster uses for scripts/netlab.sh (tools/gift-cluster/local_cluster.h).
#include <gtest/gtest.h>

#include "tools/gift-cluster/local_cluster.h"

namespace gift::tools {
namespace {

TEST(ClusterPlacementTest, ParsesEveryField) {
  auto p = ClusterPlacement::FromJson(R"({
    "coordinator": {"host": "n-c", "address": "198.18.0.1", "device": "lab0",
                    "prefix": ["/usr/sbin/ip", "netns", "exec", "n-c"]},
    "servers": [{"address": "198.18.0.10"}],
    "workers": [{"host": "n-w0"}, {"host": "n-w1", "device": "lab0"}]})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->coordinator.host, "n-c");
  EXPECT_EQ(p->coordinator.address, "198.18.0.1");
  EXPECT_EQ(p->coordinator.device, "lab0");
  EXPECT_EQ(p->coordinator.prefix,
            (std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", "n-c"}));
  ASSERT_EQ(p->servers.size(), 1u);
  EXPECT_EQ(p->servers[0].address, "198.18.0.10");
  ASSERT_EQ(p->workers.size(), 2u);
  EXPECT_EQ(p->workers[1].device, "lab0");
  EXPECT_FALSE(p->empty());
  EXPECT_TRUE(ClusterPlacement().empty());
}

TEST(ClusterPlacementTest, RejectsWhatItDoesNotKnow) {
  for (const char* bad : {"[]", "{", R"({"coordinators": {}})", R"({"servers": {}})",
                          R"({"workers": [{"adress": "x"}]})", R"({"coordinator": {"host": 1}})",
                          R"({"coordinator": {"prefix": "ip"}})",
                          R"({"coordinator": {"prefix": ["ip", "netns"]}})"}) {
    auto p = ClusterPlacement::FromJson(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ClusterPlacement::FromJsonFile("/nonexistent/placement.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ClusterPlacementTest, ClusterChecksTheCounts) {
  LocalClusterOptions options;
  options.binaries = {"/bin/true", "/bin/true", "/bin/true"};
  options.dir = ::testing::TempDir() + "/placement_counts";
  options.servers = 2;
  options.workers = 1;
  options.placement.servers.resize(1);
  EXPECT_EQ(LocalCluster::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NetDevCountersTest, ReadsLoopback) {
  auto lo = ReadNetDevCounters(0, "lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->device, "lo");
  EXPECT_EQ(ReadNetDevCounters(0, "no-such-dev").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gift::tools
