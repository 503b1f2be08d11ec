#include "server/aggregator/chunk_reducer.h"

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

constexpr uint64_t kRows = 8, kCols = 256;
constexpr uint32_t kWorld = 4;

using codec::testing::Spec;

std::vector<float> Gradient(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(kRows * kCols);
  for (float& x : g) x = normal(rng);
  return g;
}

codec::EncodedTensor Encode(const std::vector<float>& g, uint32_t rank, uint64_t step) {
  auto t = codec::EncodedTensor::Create(Spec("e4m3/block128"), kRows, kCols).value();
  EXPECT_TRUE(
      codec::Encode(g.data(), t.mutable_view(), {.tensor = 7, .step = step, .rank = rank}).ok());
  return t;
}

std::vector<uint8_t> Payload(const codec::EncodedTensor& t) {
  const uint64_t dims[] = {kRows, kCols};
  return codec::SerializePayload(t.view(), dims).value();
}

ChunkHeader Push(uint64_t epoch, uint64_t step, uint32_t rank, uint64_t basis = 1) {
  return {.kind = ChunkKind::kPush,
          .epoch = epoch,
          .step = step,
          .tensor_id = 7,
          .basis_version = basis,
          .chunk_index = 0,
          .rank = rank,
          .world_size = kWorld};
}

// Every rank's push of its `encoded` contribution to chunk 0 of `tensor` at
// epoch 1; the result the last one completed (nullopt: none did).
std::optional<ReducedChunk> PushEveryRank(ChunkReducer& reducer, uint64_t step, uint64_t tensor,
                                          uint64_t basis,
                                          const std::vector<codec::EncodedTensor>& encoded) {
  std::optional<ReducedChunk> result;
  for (uint32_t rank = 0; rank < kWorld; ++rank) {
    ChunkHeader h = Push(1, step, rank, basis);
    h.tensor_id = tensor;
    auto added = reducer.AddPush(h, Payload(encoded[rank]));
    EXPECT_TRUE(added.ok()) << added.status();
    if (added.ok() && added->has_value()) result = **std::move(added);
  }
  return result;
}

std::unique_ptr<ChunkReducer> MakeReducer(uint64_t epoch = 1) {
  auto r = ChunkReducer::Create({.pull_spec = Spec("bf16")});
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->SetEpoch(epoch, kWorld, {{{7, 0}, {kRows, kCols}}}).ok());
  return *std::move(r);
}

TEST(ChunkReducerTest, ReducesInRankOrderWhateverTheArrivalOrder) {
  std::vector<codec::EncodedTensor> encoded;
  for (uint32_t r = 0; r < kWorld; ++r) encoded.push_back(Encode(Gradient(r), r, 5));
  // The reference: ReduceEncoded over the ranks in order, then bf16.
  std::vector<codec::EncodedView> views;
  for (const auto& e : encoded) views.push_back(e.view());
  auto want = codec::EncodedTensor::Create(Spec("bf16"), kRows, kCols).value();
  std::vector<float> sum(kRows * kCols);
  ASSERT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f / kWorld, want.mutable_view(),
                                   {.tensor = 7, .step = 5, .rank = 0})
                  .ok());
  const uint64_t dims[] = {kRows, kCols};
  const std::vector<uint8_t> want_bytes = codec::SerializePayload(want.view(), dims).value();

  std::vector<uint32_t> order = {2, 0, 3, 1};
  do {
    auto reducer = MakeReducer();
    std::optional<ReducedChunk> result;
    for (size_t i = 0; i < order.size(); ++i) {
      auto r = reducer->AddPush(Push(1, 5, order[i]), Payload(encoded[order[i]]));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->has_value(), i + 1 == order.size());
      if (r->has_value()) result = **r;
    }
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->payload, want_bytes);
    EXPECT_EQ(result->header.kind, ChunkKind::kResult);
    EXPECT_EQ(result->header.rank, kWorld);
    EXPECT_EQ(result->header.basis_version, 1u);
    EXPECT_EQ(reducer->pending_chunks(), 0u);
    EXPECT_EQ(reducer->pending_bytes(), 0u);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(ChunkReducerTest, RefusesBadPushesWithoutSideEffects) {
  auto reducer = MakeReducer(3);
  const auto payload = Payload(Encode(Gradient(1), 0, 1));
  auto code = [&](const ChunkHeader& h, std::vector<uint8_t> bytes) {
    return reducer->AddPush(h, std::move(bytes)).status().code();
  };
  EXPECT_EQ(code(Push(2, 1, 0), payload), absl::StatusCode::kFailedPrecondition);  // stale epoch
  ChunkHeader h = Push(3, 1, 0);
  h.world_size = 5;
  EXPECT_EQ(code(h, payload), absl::StatusCode::kInvalidArgument);
  h = Push(3, 1, 0);
  h.kind = ChunkKind::kResult;
  EXPECT_EQ(code(h, payload), absl::StatusCode::kInvalidArgument);
  auto corrupt = payload;
  corrupt[corrupt.size() / 2] ^= 0x40;
  EXPECT_EQ(code(Push(3, 1, 0), corrupt), absl::StatusCode::kDataLoss);
  EXPECT_EQ(code(Push(3, 1, 0), {1, 2, 3}), absl::StatusCode::kInvalidArgument);
  // Wrong shape: a 4 x 512 payload for an 8 x 256 chunk.
  auto other = codec::EncodedTensor::Create(Spec("e4m3/block128"), 4, 512).value();
  std::vector<float> g(4 * 512, 0.5f);
  ASSERT_TRUE(codec::Encode(g.data(), other.mutable_view()).ok());
  const uint64_t dims[] = {4, 512};
  EXPECT_EQ(code(Push(3, 1, 0), codec::SerializePayload(other.view(), dims).value()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reducer->pending_chunks(), 0u);

  // Counted once; never mixed.
  ASSERT_TRUE(reducer->AddPush(Push(3, 1, 0), payload).ok());
  EXPECT_EQ(code(Push(3, 1, 0), payload), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(code(Push(3, 1, 1, /*basis=*/2), payload), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reducer->pending_chunks(), 1u);
  EXPECT_EQ(reducer->pending_bytes(), payload.size());
}

TEST(ChunkReducerTest, NewEpochAbortsIncompleteChunks) {
  auto reducer = MakeReducer(1);
  const auto payload = Payload(Encode(Gradient(1), 0, 1));
  ASSERT_TRUE(reducer->AddPush(Push(1, 10, 0), payload).ok());
  ASSERT_TRUE(reducer->AddPush(Push(1, 11, 2), payload).ok());
  EXPECT_EQ(reducer->SetEpoch(1, 3, {}).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(reducer->incomplete_steps().Describe(),
            "step 10 (1 chunk): ranks 1, 2, 3 missing; step 11 (1 chunk): ranks 0, 1, 3 missing");
  auto update = reducer->SetEpoch(2, 3, {{{7, 0}, {kRows, kCols}}});
  ASSERT_TRUE(update.ok());
  ASSERT_EQ(update->aborted.size(), 2u);
  EXPECT_EQ(update->aborted_epoch, 1u);
  EXPECT_EQ(update->aborted_steps.Describe(),
            "step 10 (1 chunk): ranks 1, 2, 3 missing; step 11 (1 chunk): ranks 0, 1, 3 missing");
  EXPECT_TRUE(reducer->incomplete_steps().empty());
  EXPECT_TRUE(update->completed.empty());
  for (const ChunkHeader& h : update->aborted) {
    EXPECT_EQ(h.kind, ChunkKind::kAbort);
    EXPECT_EQ(h.epoch, 1u);
    EXPECT_EQ(h.status_code, static_cast<uint32_t>(absl::StatusCode::kAborted));
  }
  EXPECT_EQ(reducer->pending_chunks(), 0u);
  // The old epoch's pushes are refused; the new world size applies.
  EXPECT_EQ(reducer->AddPush(Push(1, 10, 1), payload).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ChunkHeader h = Push(2, 10, 0);
  h.world_size = 3;
  for (uint32_t r = 0; r < 3; ++r) {
    h.rank = r;
    auto result = reducer->AddPush(h, payload);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->has_value(), r == 2);
  }
}

TEST(ChunkReducerTest, ACompletedStepSupersedesTheChunksEarlierStepsThatRanksAbandoned) {
  auto reducer = MakeReducer(1);
  const auto payload = Payload(Encode(Gradient(1), 0, 1));
  EXPECT_EQ(reducer->last_push(), absl::InfinitePast());
  // Steps 3 and 4 were abandoned after some ranks pushed them; step 6 is
  // ahead of step 5 for rank 0 (it cannot be, but it must not be dropped).
  ASSERT_TRUE(reducer->AddPush(Push(1, 3, 0), payload).ok());
  ASSERT_TRUE(reducer->AddPush(Push(1, 4, 1), payload).ok());
  ASSERT_TRUE(reducer->AddPush(Push(1, 4, 2), payload).ok());
  ASSERT_TRUE(reducer->AddPush(Push(1, 6, 0), payload).ok());
  const absl::Time before = absl::Now();
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto result = reducer->AddPush(Push(1, 5, r), payload);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->has_value(), r + 1 == kWorld);
  }
  EXPECT_GE(reducer->last_push(), before);
  EXPECT_EQ(reducer->superseded_chunks(), 2u);
  EXPECT_EQ(reducer->pending_chunks(), 1u);  // step 6
  EXPECT_EQ(reducer->pending_bytes(), payload.size());
  EXPECT_EQ(reducer->incomplete_steps().Describe(), "step 6 (1 chunk): ranks 1, 2, 3 missing");
  // A superseded step's slot is free again: nothing of it is kept.
  ASSERT_TRUE(reducer->AddPush(Push(1, 4, 1), payload).ok());
  EXPECT_EQ(reducer->pending_chunks(), 2u);
  // An epoch change aborts what is left, not what was superseded.
  auto update = reducer->SetEpoch(2, kWorld, {{{7, 0}, {kRows, kCols}}});
  ASSERT_TRUE(update.ok());
  EXPECT_EQ(update->aborted.size(), 2u);
  EXPECT_EQ(reducer->superseded_chunks(), 2u);
}

TEST(ChunkReducerTest, PushesForAChunkNotKnownYetWaitForAddChunks) {
  auto reducer = MakeReducer(1);
  ChunkHeader h = Push(1, 0, 0);
  h.tensor_id = 8;
  const auto payload = Payload(Encode(Gradient(1), 0, 0));
  for (uint32_t r = 0; r < kWorld; ++r) {
    h.rank = r;
    auto result = reducer->AddPush(h, payload);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_FALSE(result->has_value());
  }
  EXPECT_EQ(reducer->deferred_pushes(), kWorld);
  EXPECT_EQ(reducer->AddChunks(2, {{{8, 0}, {kRows, kCols}}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reducer->AddChunks(1, {{{7, 0}, {1, kCols}}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // a known chunk cannot change shape
  auto update = reducer->AddChunks(1, {{{8, 0}, {kRows, kCols}}, {{7, 0}, {kRows, kCols}}});
  ASSERT_TRUE(update.ok()) << update.status();
  EXPECT_TRUE(update->refused.empty());
  ASSERT_EQ(update->completed.size(), 1u);
  EXPECT_EQ(update->completed[0].header.tensor_id, 8u);
  EXPECT_EQ(update->completed[0].header.rank, kWorld);
  EXPECT_EQ(reducer->deferred_pushes(), 0u);
}

TEST(ChunkReducerTest, PushesOfAFutureEpochAreReplayedWhenItArrives) {
  auto reducer = MakeReducer(1);
  const auto payload = Payload(Encode(Gradient(1), 0, 0));
  // Ranks of epoch 3 push before this shard learns of epoch 2 or 3.
  ChunkHeader h = Push(3, 5, 0);
  h.world_size = 2;
  ASSERT_TRUE(reducer->AddPush(h, payload).ok());
  h.rank = 1;
  ASSERT_TRUE(reducer->AddPush(h, payload).ok());
  ChunkHeader old = Push(2, 5, 0);
  ASSERT_TRUE(reducer->AddPush(old, payload).ok());  // epoch 2 ends unseen
  EXPECT_EQ(reducer->deferred_pushes(), 3u);
  EXPECT_EQ(reducer->pending_chunks(), 0u);

  auto update = reducer->SetEpoch(3, 2, {{{7, 0}, {kRows, kCols}}});
  ASSERT_TRUE(update.ok()) << update.status();
  ASSERT_EQ(update->completed.size(), 1u);
  EXPECT_EQ(update->completed[0].header.epoch, 3u);
  EXPECT_EQ(update->completed[0].header.step, 5u);
  ASSERT_EQ(update->refused.size(), 1u);  // the push of epoch 2
  EXPECT_EQ(update->refused[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reducer->deferred_pushes(), 0u);
}

TEST(ChunkReducerTest, DeferredBytesAreBounded) {
  const auto payload = Payload(Encode(Gradient(1), 0, 0));
  auto r = ChunkReducer::Create(
      {.pull_spec = Spec("bf16"), .max_deferred_bytes = payload.size() + payload.size() / 2});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->AddPush(Push(1, 0, 0), payload).ok());  // no epoch yet: deferred
  EXPECT_EQ((*r)->AddPush(Push(1, 0, 1), payload).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ChunkReducerTest, Fp32PushesGetAnExactFp32Result) {
  auto r = ChunkReducer::Create({.pull_spec = Spec("bf16")});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->SetEpoch(1, kWorld, {{{7, 0}, {kRows, kCols}}}).ok());
  std::vector<std::vector<float>> grads;
  std::optional<ReducedChunk> reduced;
  for (uint32_t rank = 0; rank < kWorld; ++rank) {
    grads.push_back(Gradient(rank + 40));
    auto t = codec::EncodedTensor::Create(Spec("fp32"), kRows, kCols).value();
    ASSERT_TRUE(codec::Encode(grads.back().data(), t.mutable_view()).ok());
    auto result = (*r)->AddPush(Push(1, 0, rank), Payload(t));
    ASSERT_TRUE(result.ok()) << result.status();
    if (result->has_value()) reduced = **std::move(result);
  }
  ASSERT_TRUE(reduced.has_value());
  auto parsed = codec::ParsePayload(reduced->payload);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->view.spec.format, codec::Format::kF32);
  std::vector<float> avg(kRows * kCols);
  ASSERT_TRUE(codec::Decode(parsed->view, avg.data()).ok());
  for (size_t i = 0; i < avg.size(); ++i) {
    float sum = 0.0f;
    for (const auto& g : grads) sum += g[i];
    ASSERT_EQ(avg[i], sum * (1.0f / kWorld)) << i;
  }
}

TEST(ChunkReducerTest, PullSpecFollowsSetPullSpec) {
  auto reducer = MakeReducer(1);
  ASSERT_TRUE(reducer->SetPullSpec(Spec("e4m3/block128")).ok());
  EXPECT_EQ(reducer->pull_spec(), Spec("e4m3/block128"));
  codec::CodecSpec bad = Spec("e4m3/block128");
  bad.block_size = 7;
  EXPECT_EQ(reducer->SetPullSpec(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reducer->pull_spec(), Spec("e4m3/block128"));
}

// Each tensor's results in its own pull codec (the policy's per-tensor
// codec), bit for bit the rank-order reduction encoded in it; tensors without
// one use the reducer's.
TEST(ChunkReducerTest, PullSpecPerTensor) {
  auto r = ChunkReducer::Create({.pull_spec = Spec("bf16")});
  ASSERT_TRUE(r.ok());
  ChunkReducer& reducer = **r;
  ASSERT_TRUE(
      reducer
          .SetEpoch(1, kWorld,
                    {{{7, 0}, {kRows, kCols}}, {{8, 0}, {kRows, kCols}}, {{9, 0}, {kRows, kCols}}})
          .ok());
  ASSERT_TRUE(reducer.SetTensorPullSpecs({{8, Spec("nvfp4")}, {9, Spec("e4m3/block128")}}).ok());
  EXPECT_EQ(reducer.pull_spec(7), Spec("bf16"));
  EXPECT_EQ(reducer.pull_spec(8), Spec("nvfp4"));
  codec::CodecSpec bad = Spec("e4m3/block128");
  bad.block_size = 7;
  const absl::Status refused = reducer.SetTensorPullSpecs({{7, Spec("nvfp4")}, {9, bad}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("tensor 9"), std::string::npos) << refused;
  EXPECT_EQ(reducer.pull_spec(7), Spec("bf16"));  // unchanged

  std::vector<codec::EncodedTensor> encoded;
  std::vector<codec::EncodedView> views;
  for (uint32_t rank = 0; rank < kWorld; ++rank) encoded.push_back(Encode(Gradient(rank), rank, 2));
  for (const auto& e : encoded) views.push_back(e.view());
  for (const auto& [tensor, pull] :
       {std::pair{7u, "bf16"}, std::pair{8u, "nvfp4"}, std::pair{9u, "e4m3/block128"}}) {
    const std::optional<ReducedChunk> result =
        PushEveryRank(reducer, /*step=*/2, tensor, /*basis=*/1, encoded);
    ASSERT_TRUE(result.has_value()) << tensor;
    auto parsed = codec::ParsePayload(result->payload);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->view.spec, Spec(pull)) << tensor;
    auto want = codec::EncodedTensor::Create(Spec(pull), kRows, kCols).value();
    std::vector<float> sum(kRows * kCols);
    ASSERT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f / kWorld, want.mutable_view()).ok());
    const uint64_t dims[] = {kRows, kCols};
    EXPECT_EQ(result->payload, codec::SerializePayload(want.view(), dims).value()) << tensor;
  }
  // Replacing the map drops what it no longer names.
  ASSERT_TRUE(reducer.SetTensorPullSpecs({}).ok());
  EXPECT_EQ(reducer.pull_spec(8), Spec("bf16"));
}

// A basis version's own pull codec (the owner's choice under the fidelity
// target) encodes that version's results; other versions keep the tensor's.
TEST(ChunkReducerTest, PullSpecPerBasisVersion) {
  auto r = ChunkReducer::Create({.pull_spec = Spec("bf16")});
  ASSERT_TRUE(r.ok());
  ChunkReducer& reducer = **r;
  ASSERT_TRUE(reducer.SetEpoch(1, kWorld, {{{7, 0}, {kRows, kCols}}}).ok());
  ASSERT_TRUE(
      reducer.SetTensorPullSpecs({{7, Spec("e4m3/block128")}}, {{{7, 3}, Spec("nvfp4")}}).ok());
  EXPECT_EQ(reducer.pull_spec(7, 3), Spec("nvfp4"));
  EXPECT_EQ(reducer.pull_spec(7, 2), Spec("e4m3/block128"));
  EXPECT_EQ(reducer.pull_spec(8, 3), Spec("bf16"));
  codec::CodecSpec bad = Spec("nvfp4");
  bad.block_size = 7;
  const absl::Status refused = reducer.SetTensorPullSpecs({}, {{{7, 4}, bad}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("tensor 7 version 4"), std::string::npos) << refused;

  std::vector<codec::EncodedTensor> encoded;
  for (uint32_t rank = 0; rank < kWorld; ++rank) encoded.push_back(Encode(Gradient(rank), rank, 2));
  for (const auto& [step, version, pull] :
       {std::tuple{2u, 3u, "nvfp4"}, std::tuple{3u, 2u, "e4m3/block128"}}) {
    const std::optional<ReducedChunk> result =
        PushEveryRank(reducer, step, /*tensor=*/7, version, encoded);
    ASSERT_TRUE(result.has_value()) << version;
    auto parsed = codec::ParsePayload(result->payload);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->view.spec, Spec(pull)) << version;
  }
}

TEST(ChunkReducerTest, RejectsAnInvalidPullSpec) {
  codec::CodecSpec bad = Spec("e4m3/block128");
  bad.block_size = 7;
  EXPECT_EQ(ChunkReducer::Create({.pull_spec = bad}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::server
