// The reducer's zero-copy data path: placed pushes, results encoded in place
// into reusable send buffers, the chunk-keyed stochastic rounding of
// results, and the lifetimes of slots and result buffers.
#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "common/dataplane/chunk_rng_key.h"
#include "gtest/gtest.h"
#include "server/aggregator/chunk_reducer.h"
#include "tests/codec/test_util.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

constexpr uint64_t kRows = 8, kCols = 1024;
constexpr uint32_t kWorld = 4;
constexpr uint64_t kTensor = 7;

using codec::testing::Spec;

std::vector<float> Gradient(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(kRows * kCols);
  for (float& x : g) x = normal(rng) * std::pow(10.0f, float(seed % 3) - 1.0f);
  return g;
}

std::vector<uint8_t> Payload(const std::string& spec, uint32_t seed) {
  auto t = codec::EncodedTensor::Create(Spec(spec), kRows, kCols).value();
  const std::vector<float> g = Gradient(seed);
  EXPECT_TRUE(codec::Encode(g.data(), t.mutable_view(), {.tensor = 1, .rank = seed}).ok());
  const uint64_t dims[] = {kRows, kCols};
  return codec::SerializePayload(t.view(), dims).value();
}

ChunkHeader Push(uint64_t epoch, uint64_t step, uint32_t rank, uint32_t chunk = 0) {
  return {.kind = ChunkKind::kPush,
          .epoch = epoch,
          .step = step,
          .tensor_id = kTensor,
          .basis_version = 1,
          .chunk_index = chunk,
          .rank = rank,
          .world_size = kWorld};
}

// codec::ReduceEncoded over the payloads in rank order, serialized: what
// the server's result must be, bit for bit.
std::vector<uint8_t> Reference(const std::vector<std::vector<uint8_t>>& payloads,
                               const codec::CodecSpec& out_spec, const codec::RngKey& key) {
  std::vector<codec::EncodedView> views;
  for (const auto& p : payloads) views.push_back(codec::ParsePayload(p).value().view);
  auto out = codec::EncodedTensor::Create(out_spec, kRows, kCols).value();
  std::vector<float> sum(kRows * kCols);
  EXPECT_TRUE(
      codec::ReduceEncoded(views, sum.data(), 1.0f / views.size(), out.mutable_view(), key).ok());
  const uint64_t dims[] = {kRows, kCols};
  return codec::SerializePayload(out.view(), dims).value();
}

std::unique_ptr<ChunkReducer> MakeReducer(const std::string& pull, uint32_t chunks = 1) {
  auto r = ChunkReducer::Create({.pull_spec = Spec(pull)});
  EXPECT_TRUE(r.ok()) << r.status();
  absl::flat_hash_map<ChunkId, ChunkShape> map;
  for (uint32_t c = 0; c < chunks; ++c) map[{kTensor, c}] = {kRows, kCols};
  EXPECT_TRUE((*r)->SetEpoch(1, kWorld, map).ok());
  return *std::move(r);
}

// Places and accepts one push the way the shard does (PlacePush, the
// transport's copy, AcceptPlaced).
absl::StatusOr<std::optional<ReductionJob>> PlaceAndAccept(ChunkReducer& reducer,
                                                           const ChunkHeader& h,
                                                           const std::vector<uint8_t>& payload) {
  absl::Span<uint8_t> slot = reducer.PlacePush(h, payload.size());
  if (slot.size() != payload.size()) return absl::InternalError("not placed");
  std::memcpy(slot.data(), payload.data(), payload.size());
  return reducer.AcceptPlaced(h, slot);
}

std::vector<uint8_t> Bytes(const ChunkResult& r) {
  return {r.payload().begin(), r.payload().end()};
}

TEST(ChunkReducerDataPathTest, PlacedPushesReproduceReduceEncodedInRankOrderForEverySpec) {
  const std::vector<std::string> pushes = {"e4m3/block128", "e5m2/tensor/sr", "nvfp4", "bf16"};
  const std::vector<std::string> pulls = {"bf16",           "e4m3/block32/sr", "e4m3/tensor",
                                          "e5m2/tensor/sr", "nvfp4/sr",        "e4m3/mx32",
                                          "e4m3/none/sr"};
  for (const std::string& push : pushes) {
    std::vector<std::vector<uint8_t>> payloads;
    for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload(push, r));
    for (const std::string& pull : pulls) {
      auto reducer = MakeReducer(pull);
      const uint64_t step = 3;
      const std::vector<uint8_t> want =
          Reference(payloads, Spec(pull),
                    dataplane::ChunkRngKey(kTensor, 0, step, dataplane::kResultRngRank));
      std::optional<ReductionJob> job;
      for (uint32_t r : {3u, 1u, 0u, 2u}) {  // arrival order is not rank order
        auto accepted = PlaceAndAccept(*reducer, Push(1, step, r), payloads[r]);
        ASSERT_TRUE(accepted.ok()) << accepted.status();
        if (accepted->has_value()) job = **std::move(accepted);
      }
      ASSERT_TRUE(job.has_value()) << push << " -> " << pull;
      auto result = reducer->Reduce(*std::move(job));
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(Bytes(*result), want) << push << " -> " << pull;
      EXPECT_EQ(result->header.kind, ChunkKind::kResult);
      EXPECT_EQ(result->header.rank, kWorld);
    }
  }
}

TEST(ChunkReducerDataPathTest, Fp32PushesGetTheExactSequentialAverage) {
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload("fp32", r));
  auto reducer = MakeReducer("e4m3/block32");
  std::optional<ReductionJob> job;
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto accepted = PlaceAndAccept(*reducer, Push(1, 1, r), payloads[r]);
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    if (accepted->has_value()) job = **std::move(accepted);
  }
  auto result = reducer->Reduce(*std::move(job));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Bytes(*result), Reference(payloads, Spec("fp32"), {}));
}

TEST(ChunkReducerDataPathTest, StochasticResultsDrawAStreamPerChunkAndAreReproducible) {
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload("e4m3/block128", r));
  auto run = [&](uint32_t chunk) {
    auto reducer = MakeReducer("e4m3/block32/sr", /*chunks=*/2);
    std::optional<ChunkResult> result;
    for (uint32_t r = 0; r < kWorld; ++r) {
      auto accepted = PlaceAndAccept(*reducer, Push(1, 9, r, chunk), payloads[r]);
      EXPECT_TRUE(accepted.ok()) << accepted.status();
      if (accepted.ok() && accepted->has_value()) {
        auto reduced = reducer->Reduce(**std::move(accepted));
        EXPECT_TRUE(reduced.ok()) << reduced.status();
        if (reduced.ok()) result = *std::move(reduced);
      }
    }
    return result.has_value() ? Bytes(*result) : std::vector<uint8_t>{};
  };
  const std::vector<uint8_t> chunk0 = run(0), chunk1 = run(1);
  ASSERT_FALSE(chunk0.empty());
  EXPECT_NE(chunk0, chunk1) << "two chunks with identical inputs share a random stream";
  EXPECT_EQ(run(0), chunk0) << "a result is not reproducible";
  EXPECT_EQ(run(1), chunk1);
}

TEST(ChunkReducerDataPathTest, ADuplicatePushIsRefusedAndKeepsTheAcceptedBytes) {
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload("e4m3/block128", r));
  auto reducer = MakeReducer("bf16");
  ASSERT_TRUE(PlaceAndAccept(*reducer, Push(1, 2, 0), payloads[0]).ok());
  // Placed again: no slot; the bytes then go to Accept, which refuses them.
  EXPECT_TRUE(reducer->PlacePush(Push(1, 2, 0), payloads[1].size()).empty());
  EXPECT_EQ(reducer->Accept(Push(1, 2, 0), payloads[1]).status().code(),
            absl::StatusCode::kAlreadyExists);
  // A rank whose placement is in progress is taken too.
  absl::Span<uint8_t> slot = reducer->PlacePush(Push(1, 2, 1), payloads[1].size());
  ASSERT_EQ(slot.size(), payloads[1].size());
  EXPECT_EQ(reducer->Accept(Push(1, 2, 1), payloads[0]).status().code(),
            absl::StatusCode::kAlreadyExists);
  std::memcpy(slot.data(), payloads[1].data(), slot.size());
  ASSERT_TRUE(reducer->AcceptPlaced(Push(1, 2, 1), slot).ok());
  ASSERT_TRUE(reducer->Accept(Push(1, 2, 2), payloads[2]).ok());  // unplaced: copied
  auto last = PlaceAndAccept(*reducer, Push(1, 2, 3), payloads[3]);
  ASSERT_TRUE(last.ok() && last->has_value()) << last.status();
  auto result = reducer->Reduce(**std::move(last));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Bytes(*result),
            Reference(payloads, Spec("bf16"),
                      dataplane::ChunkRngKey(kTensor, 0, 2, dataplane::kResultRngRank)));
}

TEST(ChunkReducerDataPathTest, AMalformedPlacedPushFreesItsSlot) {
  auto payload = Payload("e4m3/block128", 0);
  auto reducer = MakeReducer("bf16");
  auto corrupt = payload;
  corrupt.back() ^= 1;
  absl::Span<uint8_t> slot = reducer->PlacePush(Push(1, 2, 0), corrupt.size());
  ASSERT_FALSE(slot.empty());
  std::memcpy(slot.data(), corrupt.data(), slot.size());
  EXPECT_EQ(reducer->AcceptPlaced(Push(1, 2, 0), slot).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(reducer->pending_chunks(), 0u);
  EXPECT_TRUE(PlaceAndAccept(*reducer, Push(1, 2, 0), payload).ok());
  // A span PlacePush did not hand out is refused.
  std::vector<uint8_t> elsewhere = payload;
  EXPECT_EQ(reducer->AcceptPlaced(Push(1, 2, 1), absl::MakeSpan(elsewhere)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChunkReducerDataPathTest, APlacementNeverDeliveredDoesNotWedgeTheChunkAcrossAnEpoch) {
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload("e4m3/block128", r));
  auto reducer = MakeReducer("bf16");
  ASSERT_TRUE(PlaceAndAccept(*reducer, Push(1, 4, 0), payloads[0]).ok());
  // Rank 1's sender dies mid-transfer: placed, never delivered.
  absl::Span<uint8_t> lost = reducer->PlacePush(Push(1, 4, 1), payloads[1].size());
  ASSERT_FALSE(lost.empty());
  auto update = reducer->SetEpoch(2, kWorld, {{{kTensor, 0}, {kRows, kCols}}});
  ASSERT_TRUE(update.ok());
  ASSERT_EQ(update->aborted.size(), 1u);
  EXPECT_EQ(reducer->pending_chunks(), 0u);
  EXPECT_EQ(reducer->pending_bytes(), 0u);
  std::optional<ReductionJob> job;
  for (uint32_t r = 0; r < kWorld; ++r) {
    ChunkHeader h = Push(2, 4, r);
    auto accepted = PlaceAndAccept(*reducer, h, payloads[r]);
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    if (accepted->has_value()) job = **std::move(accepted);
  }
  ASSERT_TRUE(job.has_value());
  EXPECT_TRUE(reducer->Reduce(*std::move(job)).ok());
  // The lost transfer completes after all: refused, its orphaned slot freed.
  std::memcpy(lost.data(), payloads[1].data(), lost.size());
  EXPECT_EQ(reducer->AcceptPlaced(Push(1, 4, 1), lost).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ChunkReducerDataPathTest, AResultStillInFlightIsNotOverwrittenByTheNextStep) {
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t r = 0; r < kWorld; ++r) payloads.push_back(Payload("e4m3/block128", r));
  auto reducer = MakeReducer("e4m3/block32/sr");
  auto step = [&](uint64_t s) {
    std::optional<ChunkResult> result;
    for (uint32_t r = 0; r < kWorld; ++r) {
      auto accepted = PlaceAndAccept(*reducer, Push(1, s, r), payloads[r]);
      EXPECT_TRUE(accepted.ok()) << accepted.status();
      if (accepted.ok() && accepted->has_value()) {
        auto reduced = reducer->Reduce(**std::move(accepted));
        EXPECT_TRUE(reduced.ok()) << reduced.status();
        if (reduced.ok()) result = *std::move(reduced);
      }
    }
    return result;
  };
  std::optional<ChunkResult> first = step(1);  // held: its sends are in flight
  ASSERT_TRUE(first.has_value());
  const std::vector<uint8_t> first_bytes = Bytes(*first);
  std::optional<ChunkResult> second = step(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(second->payload().data(), first->payload().data());
  EXPECT_EQ(Bytes(*first), first_bytes);
  const uint8_t* second_buffer = second->payload().data();
  const uint8_t* first_buffer = first->payload().data();
  first.reset();  // every send of step 1 completed
  second.reset();
  // Both free again: the next results reuse them, no new buffer.
  std::optional<ChunkResult> third = step(3);
  ASSERT_TRUE(third.has_value());
  const uint8_t* p = third->payload().data();
  EXPECT_TRUE(p == first_buffer || p == second_buffer);
}

}  // namespace
}  // namespace gift::server
