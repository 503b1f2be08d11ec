// Node groups of the worker (node_group.h): who is in a worker's group,
// which member leads each chunk, and the leader's FP32 sums.
#include "worker/engine/node_group.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "gtest/gtest.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

gift::v1::ClusterState State(const std::vector<std::string>& nodes, gift::v1::Hierarchy h) {
  gift::v1::ClusterState state;
  state.set_epoch(3);
  state.mutable_policy()->set_hierarchy(h);
  for (size_t r = 0; r < nodes.size(); ++r) {
    gift::v1::Member* m = state.add_workers();
    m->set_member_id(absl::StrCat("m", r));
    m->set_rank(static_cast<uint32_t>(r));
    m->set_node(nodes[r]);
    m->set_data_address(absl::StrCat("addr", r));
  }
  return state;
}

TEST(NodeGroupTest, GroupsTheWorkersOfOneNodeUnderHierarchyNode) {
  const auto state = State({"b", "a", "b", "", "b"}, gift::v1::HIERARCHY_NODE);
  auto group = NodeGroupOf(state, 2);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->self, 2u);
  EXPECT_EQ(group->ranks, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(group->addresses, (std::vector<std::string>{"addr0", "addr2", "addr4"}));
  EXPECT_EQ(group->AddressOf(4), "addr4");
  // Alone on its node, or no node: every chunk pushed directly.
  EXPECT_EQ(NodeGroupOf(state, 1), nullptr);
  EXPECT_EQ(NodeGroupOf(state, 3), nullptr);
  EXPECT_EQ(NodeGroupOf(state, 9), nullptr);
  EXPECT_EQ(NodeGroupOf(State({"b", "b"}, gift::v1::HIERARCHY_NONE), 0), nullptr);
  EXPECT_EQ(NodeGroupOf(State({"b", "b"}, gift::v1::HIERARCHY_UNSPECIFIED), 0), nullptr);
}

TEST(NodeGroupTest, LeadersAreSpreadRoundRobinOverTheChunks) {
  const auto state = State({"n", "n", "n"}, gift::v1::HIERARCHY_NODE);
  std::vector<std::shared_ptr<const NodeGroup>> groups;
  for (uint32_t r = 0; r < 3; ++r) groups.push_back(NodeGroupOf(state, r));
  std::vector<int> led(3, 0);
  for (uint64_t tensor = 1; tensor <= 4; ++tensor) {
    for (uint32_t chunk = 0; chunk < 6; ++chunk) {
      const uint32_t leader = groups[0]->LeaderOf(tensor, chunk);
      // Every member names the same leader.
      for (const auto& g : groups) EXPECT_EQ(g->LeaderOf(tensor, chunk), leader);
      // Consecutive chunks of a tensor go to consecutive members.
      EXPECT_EQ(groups[0]->LeaderOf(tensor, chunk + 1), (leader + 1) % 3);
      ++led[leader];
    }
  }
  EXPECT_EQ(led, (std::vector<int>{8, 8, 8}));
}

std::vector<uint8_t> Fp32Payload(const std::vector<float>& x) {
  const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
  const uint64_t dims[] = {1, x.size()};
  std::vector<uint8_t> out(codec::PayloadSizeFor(fp32, dims).value());
  auto view = codec::StartPayload(fp32, dims, absl::MakeSpan(out)).value();
  EXPECT_TRUE(codec::Encode(x.data(), view).ok());
  codec::FinishPayload(absl::MakeSpan(out));
  return out;
}

NodeContribution From(uint32_t rank, uint64_t tensor, uint32_t chunk, std::vector<float> x) {
  return {.header = {.kind = ChunkKind::kNodeMember,
                     .epoch = 3,
                     .step = 1,
                     .tensor_id = tensor,
                     .chunk_index = chunk,
                     .rank = rank,
                     .world_size = 3},
          .payload = Fp32Payload(x)};
}

TEST(NodeSumsTest, SumsTheGroupsChunksOnceEveryMemberIsIn) {
  const auto state = State({"n", "n", "n"}, gift::v1::HIERARCHY_NODE);
  auto group = NodeGroupOf(state, 1);
  // Rank 1 leads (tensor 1, chunk 0): (1 + 0) mod 3 = 1.
  ASSERT_EQ(group->LeaderOf(1, 0), 1u);
  NodeSums sums;
  sums.Reset(group);
  // A member's chunk may come before the leader planned the chunk.
  ASSERT_TRUE(sums.Offer(From(2, 1, 0, {4, 40})).ok());
  const std::vector<float> own = {2, 20};
  sums.Lead({1, 0}, own.data(), own.size(), 77);
  EXPECT_TRUE(sums.Leads({1, 0}));
  EXPECT_TRUE(sums.Ready().empty());
  // Refused: a duplicate, the leader itself, a non-member, a chunk led by
  // another member.
  EXPECT_FALSE(sums.Offer(From(2, 1, 0, {4, 40})).ok());
  EXPECT_FALSE(sums.Offer(From(1, 1, 0, {2, 20})).ok());
  EXPECT_FALSE(sums.Offer(From(5, 1, 0, {1, 1})).ok());
  EXPECT_FALSE(sums.Offer(From(0, 1, 1, {1, 1})).ok());
  ASSERT_TRUE(sums.Offer(From(0, 1, 0, {1, 10})).ok());
  ASSERT_EQ(sums.Ready(), (std::vector<NodeSums::Key>{{1, 0}}));
  std::vector<float> sum;
  auto cookie = sums.TakeSum({1, 0}, sum, {});
  ASSERT_TRUE(cookie.ok()) << cookie.status();
  EXPECT_EQ(*cookie, 77u);
  EXPECT_EQ(sum, (std::vector<float>{7, 70}));
  EXPECT_TRUE(sums.Ready().empty());  // taken once
  EXPECT_FALSE(sums.TakeSum({1, 0}, sum, {}).ok());
}

TEST(NodeSumsTest, AMisShapedContributionFailsTheSum) {
  auto group = NodeGroupOf(State({"n", "n"}, gift::v1::HIERARCHY_NODE), 0);
  ASSERT_EQ(group->LeaderOf(2, 0), 0u);
  NodeSums sums;
  sums.Reset(group);
  const std::vector<float> own = {1, 2, 3};
  sums.Lead({2, 0}, own.data(), own.size(), 0);
  ASSERT_TRUE(sums.Offer(From(1, 2, 0, {1, 2})).ok());
  std::vector<float> sum;
  EXPECT_EQ(sums.TakeSum({2, 0}, sum, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::worker
