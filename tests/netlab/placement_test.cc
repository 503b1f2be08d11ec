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

TEST(ClusterPlacementTest, CoLocatedServersRunOnTheWorkersHosts) {
  auto p = ClusterPlacement::FromJson(R"({
    "workers": [{"host": "n-w0", "address": "198.18.0.100"},
                {"host": "n-w1", "address": "198.18.0.101"}],
    "colocate_servers": true})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->colocate_servers);
  EXPECT_EQ(p->server(0).host, "n-w0");
  EXPECT_EQ(p->server(1).address, "198.18.0.101");
  EXPECT_EQ(p->server(2).host, "n-w0");  // server i on worker i mod P
  for (const char* bad : {R"({"colocate_servers": true})", R"({"colocate_servers": 1})",
                          R"({"servers": [{}], "workers": [{}], "colocate_servers": true})"}) {
    EXPECT_EQ(ClusterPlacement::FromJson(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  ClusterPlacement separate;
  separate.servers = {{.host = "n-s0"}};
  EXPECT_EQ(separate.server(0).host, "n-s0");
  EXPECT_EQ(ClusterPlacement().server(3).host, "");  // loopback
}

TEST(ClusterPlacementTest, ClusterChecksTheCounts) {
  LocalClusterOptions options;
  options.binaries = {"/bin/true", "/bin/true", "/bin/true"};
  options.dir = ::testing::TempDir() + "/placement_counts";
  options.servers = 2;
  options.workers = 1;
  options.placement.servers.resize(1);
  EXPECT_EQ(LocalCluster::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.placement = {};
  options.placement.colocate_servers = true;  // but no workers to put them on
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
