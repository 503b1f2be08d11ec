// Node sums at the reducer (node_coverage.h, chunk_reducer.h): a kNodePush
// counts for its sender's node group, each rank once per (step, chunk), and
// the average is over the world.
#include "server/aggregator/node_coverage.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "gtest/gtest.h"
#include "server/aggregator/chunk_reducer.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

constexpr uint64_t kRows = 4, kCols = 64;
constexpr uint32_t kWorld = 4;
const std::vector<std::string> kNodes = {"a", "a", "b", "b"};

// An FP32 payload of `value` everywhere.
std::vector<uint8_t> Payload(float value) {
  const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
  const uint64_t dims[] = {kRows, kCols};
  std::vector<uint8_t> out(codec::PayloadSizeFor(fp32, dims).value());
  auto view = codec::StartPayload(fp32, dims, absl::MakeSpan(out)).value();
  const std::vector<float> x(kRows * kCols, value);
  EXPECT_TRUE(codec::Encode(x.data(), view).ok());
  codec::FinishPayload(absl::MakeSpan(out));
  return out;
}

ChunkHeader Header(ChunkKind kind, uint32_t rank, uint32_t ranks = 0, uint64_t step = 3) {
  return {.kind = kind,
          .epoch = 1,
          .step = step,
          .tensor_id = 7,
          .chunk_index = 0,
          .rank = rank,
          .world_size = kWorld,
          .status_code = ranks};
}

std::unique_ptr<ChunkReducer> MakeReducer() {
  auto r = ChunkReducer::Create(
      {.pull_spec = {.format = codec::Format::kBf16, .scaling = codec::Scaling::kNone}});
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)
                  ->SetEpoch(1, kWorld, {{{7, 0}, {kRows, kCols}}},
                             NodeGroups::FromNodes(kNodes))
                  .ok());
  return *std::move(r);
}

float First(const ReducedChunk& r) {
  auto parsed = codec::ParsePayload(r.payload).value();
  std::vector<float> out(kRows * kCols);
  EXPECT_TRUE(codec::Decode(parsed.view, out.data()).ok());
  for (float x : out) EXPECT_EQ(x, out[0]);
  return out[0];
}

TEST(NodeGroupsTest, GroupsRanksByNodeAndEmptyNodesStandAlone) {
  const NodeGroups g = NodeGroups::FromNodes({"a", "", "a", "b", ""});
  EXPECT_EQ(g.GroupOf(0), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(g.GroupOf(2), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(g.GroupOf(1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(g.GroupOf(4), (std::vector<uint32_t>{4}));
  EXPECT_EQ(g.GroupOf(3), (std::vector<uint32_t>{3}));
  EXPECT_EQ(NodeGroups().GroupOf(2), (std::vector<uint32_t>{2}));
}

TEST(NodeGroupsTest, CoverCountsEachRankOnce) {
  const NodeGroups g = NodeGroups::FromNodes(kNodes);
  std::vector<uint8_t> covered(kWorld, 0);
  EXPECT_EQ(g.Cover(Header(ChunkKind::kNodePush, 1, 2), absl::MakeSpan(covered)).value(), 2u);
  EXPECT_EQ(covered, (std::vector<uint8_t>{1, 1, 0, 0}));
  // The other member's partial, or its own push, would count ranks twice.
  EXPECT_EQ(g.Cover(Header(ChunkKind::kNodePush, 0, 2), absl::MakeSpan(covered)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(g.Cover(Header(ChunkKind::kPush, 0), absl::MakeSpan(covered)).status().code(),
            absl::StatusCode::kAlreadyExists);
  // A sum that claims another size than the node's group.
  EXPECT_EQ(g.Cover(Header(ChunkKind::kNodePush, 2, 1), absl::MakeSpan(covered)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Cover(Header(ChunkKind::kResult, 2), absl::MakeSpan(covered)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(covered, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(g.Cover(Header(ChunkKind::kPush, 3), absl::MakeSpan(covered)).value(), 1u);
  EXPECT_EQ(g.Cover(Header(ChunkKind::kPush, 2), absl::MakeSpan(covered)).value(), 1u);
  EXPECT_EQ(covered, (std::vector<uint8_t>{1, 1, 1, 1}));
}

TEST(NodeCoverageReducerTest, TwoNodeSumsCompleteTheChunk) {
  auto reducer = MakeReducer();
  // Node a's sum of ranks 0 and 1 (1 + 2), led by rank 1; node b's (4 + 8)
  // led by rank 2.
  auto first = reducer->AddPush(Header(ChunkKind::kNodePush, 1, 2), Payload(3.0f));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->has_value());
  auto done = reducer->AddPush(Header(ChunkKind::kNodePush, 2, 2), Payload(12.0f));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->has_value());
  const ReducedChunk& r = **done;
  EXPECT_EQ(r.header.kind, ChunkKind::kResult);
  EXPECT_EQ(r.header.rank, kWorld);  // ranks summed
  EXPECT_EQ(First(r), 15.0f / kWorld);  // an FP32 result of FP32 pushes
}

TEST(NodeCoverageReducerTest, MixedDirectAndNodePushesCountEachRankOnce) {
  auto reducer = MakeReducer();
  ASSERT_TRUE(reducer->AddPush(Header(ChunkKind::kPush, 2), Payload(4.0f)).ok());
  // A second partial for node a, and a node b sum overlapping rank 2.
  ASSERT_TRUE(reducer->AddPush(Header(ChunkKind::kNodePush, 0, 2), Payload(3.0f)).ok());
  EXPECT_EQ(reducer->AddPush(Header(ChunkKind::kNodePush, 1, 2), Payload(3.0f)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(reducer->AddPush(Header(ChunkKind::kNodePush, 3, 2), Payload(12.0f)).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto done = reducer->AddPush(Header(ChunkKind::kPush, 3), Payload(8.0f));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ(First(**done), 15.0f / kWorld);
}

TEST(NodeCoverageReducerTest, DirectPushesOfEveryRankAverageAsBefore) {
  auto reducer = MakeReducer();
  std::optional<ReducedChunk> result;
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto got = reducer->AddPush(Header(ChunkKind::kPush, r), Payload(std::ldexp(1.0f, r)));
    ASSERT_TRUE(got.ok()) << got.status();
    if (got->has_value()) result = **got;
  }
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(First(*result), 15.0f / kWorld);
}

TEST(NodeCoverageReducerTest, ANewEpochAbortsANodesPartial) {
  auto reducer = MakeReducer();
  ASSERT_TRUE(reducer->AddPush(Header(ChunkKind::kNodePush, 1, 2), Payload(3.0f)).ok());
  auto update = reducer->SetEpoch(2, 3, {{{7, 0}, {kRows, kCols}}},
                                  NodeGroups::FromNodes({"a", "b", "b"}));
  ASSERT_TRUE(update.ok()) << update.status();
  ASSERT_EQ(update->aborted.size(), 1u);
  EXPECT_EQ(update->aborted[0].rank, 2u);  // the ranks the partial held
  // The same node sum of the old epoch is refused in the new one.
  EXPECT_FALSE(reducer->AddPush(Header(ChunkKind::kNodePush, 1, 2), Payload(3.0f)).ok());
}

}  // namespace
}  // namespace gift::server
