#include "server/aggregator/reducer_slots.h"

#include <memory>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "gtest/gtest.h"

namespace gift::server::reducer_internal {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

TEST(ReducerSlotsTest, OpenStepReusesASpareAndRecyclesOnlyAnUnusedStep) {
  ChunkState chunk({4, 8});
  StepInputs& first = OpenStep(chunk, 5, 3);
  EXPECT_EQ(first.step, 5u);
  EXPECT_EQ(first.slots.size(), 3u);
  EXPECT_EQ(first.covered, std::vector<uint8_t>(3, 0));
  EXPECT_EQ(&OpenStep(chunk, 5, 3), &first);  // the open one
  first.slots[1].state = Slot::State::kPlaced;
  RecycleIfUnused(chunk, 5);
  EXPECT_EQ(chunk.steps.size(), 1u);  // a slot is placed
  first.slots[1].state = Slot::State::kEmpty;
  RecycleIfUnused(chunk, 5);
  EXPECT_TRUE(chunk.steps.empty());
  ASSERT_EQ(chunk.spare.size(), 1u);
  const StepInputs* spare = chunk.spare.back().get();
  StepInputs& next = OpenStep(chunk, 6, 4);
  EXPECT_EQ(&next, spare);  // buffers and all
  EXPECT_EQ(next.step, 6u);
  EXPECT_EQ(next.slots.size(), 4u);
  EXPECT_TRUE(chunk.spare.empty());
  next.received = 1;
  RecycleIfUnused(chunk, 6);
  EXPECT_EQ(chunk.steps.size(), 1u);  // some rank was counted
}

TEST(ReducerSlotsTest, CheckVersionRefusesAMixedBasisVersion) {
  ChunkState chunk({4, 8});
  StepInputs& inputs = OpenStep(chunk, 0, 2);
  ChunkHeader header{.kind = ChunkKind::kPush, .basis_version = 3};
  EXPECT_TRUE(CheckVersion(header, inputs).ok());  // nothing received yet
  inputs.received = 1;
  inputs.basis_version = 2;
  EXPECT_EQ(CheckVersion(header, inputs).code(), absl::StatusCode::kFailedPrecondition);
  header.basis_version = 2;
  EXPECT_TRUE(CheckVersion(header, inputs).ok());
}

TEST(ReducerSlotsTest, CopyIntoSlotPointsTheViewAtTheSlotsBytes) {
  auto t =
      codec::EncodedTensor::Create(codec::ParseCodecSpec("e4m3/block32").value(), 2, 64).value();
  std::vector<float> x(2 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 50.0f;
  ASSERT_TRUE(codec::Encode(x.data(), t.mutable_view()).ok());
  const uint64_t dims[] = {2, 64};
  std::vector<uint8_t> payload = codec::SerializePayload(t.view(), dims).value();
  auto parsed = codec::ParsePayload(payload);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Slot slot;
  auto registry = std::make_shared<BufferRegistry>(nullptr);
  const codec::EncodedView view = CopyIntoSlot(slot, payload, parsed->view, registry);
  ASSERT_EQ(slot.buffer.size(), payload.size());
  EXPECT_EQ(view.codes, slot.buffer.data() + (parsed->view.codes - payload.data()));
  EXPECT_EQ(view.scales, slot.buffer.data() + (parsed->view.scales - payload.data()));
  payload.assign(payload.size(), 0);  // the slot's copy is what the view reads
  std::vector<float> want(x.size()), got(x.size());
  ASSERT_TRUE(codec::Decode(t.view(), want.data()).ok());
  ASSERT_TRUE(codec::Decode(view, got.data()).ok());
  EXPECT_EQ(got, want);
}

TEST(ReducerSlotsTest, EndOpenStepsAbortsPushedStepsAndOrphansPlacedSlots) {
  ChunkState chunk({4, 8});
  auto registry = std::make_shared<BufferRegistry>(nullptr);
  StepInputs& pushed = OpenStep(chunk, 10, 3);
  pushed.basis_version = 4;
  pushed.received = 2;
  pushed.slots[0].state = Slot::State::kReceived;
  pushed.slots[0].buffer.Resize(100, registry);
  pushed.slots[2].state = Slot::State::kPlaced;
  pushed.slots[2].buffer.Resize(30, registry);
  OpenStep(chunk, 11, 3);  // opened, nothing pushed
  std::vector<ChunkHeader> aborted;
  std::vector<ReusableBuffer> orphans;
  EndedSteps ended{.aborted = &aborted, .orphans = &orphans};
  EndOpenSteps(chunk, 7, 2, 9, 3, ended);
  EXPECT_TRUE(chunk.steps.empty());
  EXPECT_EQ(chunk.spare.size(), 2u);
  for (const auto& spare : chunk.spare) {
    EXPECT_EQ(spare->received, 0u);
    for (const Slot& slot : spare->slots) EXPECT_EQ(slot.state, Slot::State::kEmpty);
  }
  ASSERT_EQ(aborted.size(), 1u);
  const ChunkHeader& h = aborted[0];
  EXPECT_EQ(h.kind, ChunkKind::kAbort);
  EXPECT_EQ(h.epoch, 9u);
  EXPECT_EQ(h.step, 10u);
  EXPECT_EQ(h.tensor_id, 7u);
  EXPECT_EQ(h.chunk_index, 2u);
  EXPECT_EQ(h.basis_version, 4u);
  EXPECT_EQ(h.ranks_summed(), 2u);
  EXPECT_EQ(h.world_size, 3u);
  EXPECT_EQ(h.status_code, static_cast<uint32_t>(absl::StatusCode::kAborted));
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0].size(), 30u);
  EXPECT_EQ(ended.pushed_steps, 1u);
  EXPECT_EQ(ended.received_bytes, 100u);
}

TEST(ReducerSlotsTest, EndOpenStepsBelowAStepKeepsTheLaterOnesAndTalliesTheMissingRanks) {
  ChunkState chunk({4, 8});
  for (uint64_t step : {3, 4, 5}) {
    StepInputs& inputs = OpenStep(chunk, step, 3);
    inputs.received = 1;
    inputs.covered[step % 3] = 1;
  }
  std::vector<ReusableBuffer> orphans;
  IncompleteSteps incomplete;
  EndedSteps ended{.incomplete = &incomplete, .orphans = &orphans};  // no aborts
  EndOpenSteps(chunk, 7, 2, 9, 3, ended, /*below=*/5);
  ASSERT_EQ(chunk.steps.size(), 1u);
  EXPECT_TRUE(chunk.steps.contains(5));
  EXPECT_EQ(chunk.spare.size(), 2u);
  EXPECT_EQ(ended.pushed_steps, 2u);
  ASSERT_EQ(incomplete.steps().size(), 2u);
  EXPECT_EQ(incomplete.steps()[0].step, 3u);
  EXPECT_EQ(incomplete.steps()[0].missing_ranks, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(incomplete.Describe(),
            "step 3 (1 chunk): ranks 1, 2 missing; step 4 (1 chunk): ranks 0, 2 missing");
}

TEST(IncompleteStepsTest, AStepMissesTheRanksAnyOfItsChunksMissesAndTheTextIsBounded) {
  IncompleteSteps steps;
  EXPECT_TRUE(steps.empty());
  EXPECT_EQ(steps.Describe(), "");
  const std::vector<uint8_t> a = {1, 0, 1, 1}, b = {1, 1, 1, 0};
  steps.Add(8, a);
  steps.Add(8, b);
  steps.Add(2, std::vector<uint8_t>{0, 1, 1, 1});
  EXPECT_EQ(steps.Describe(),
            "step 2 (1 chunk): rank 0 missing; step 8 (2 chunks): ranks 1, 3 missing");
  EXPECT_EQ(steps.Describe(1), "step 2 (1 chunk): rank 0 missing; 1 more steps");
  std::vector<uint32_t> many(20);
  for (uint32_t r = 0; r < 20; ++r) many[r] = r;
  EXPECT_EQ(DescribeRanks(many),
            "ranks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 and 4 more");
}

TEST(ReducerSlotsTest, UnregisterBuffersDropsEveryRegistrationAndKeepsTheMemory) {
  int registered = 0;
  auto registry = std::make_shared<BufferRegistry>(
      [&](absl::Span<uint8_t>) -> absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> {
        ++registered;
        return std::make_unique<transport::MemoryRegion>();
      });
  ChunkState chunk({4, 8});
  std::vector<ReusableBuffer*> buffers;
  for (uint64_t step : {1, 2}) {
    StepInputs& inputs = OpenStep(chunk, step, 2);
    for (Slot& slot : inputs.slots) buffers.push_back(&slot.buffer);
  }
  RecycleIfUnused(chunk, 2);  // one open step, one spare
  ASSERT_EQ(chunk.spare.size(), 1u);
  buffers.push_back(chunk.results.emplace_back(std::make_shared<ReusableBuffer>()).get());
  for (ReusableBuffer* b : buffers) {
    b->Resize(64, registry);
    b->Register();
    ASSERT_TRUE(b->registered());
  }
  EXPECT_EQ(registered, 5);
  UnregisterBuffers(chunk);
  for (ReusableBuffer* b : buffers) {
    EXPECT_FALSE(b->registered());
    EXPECT_EQ(b->size(), 64u);
  }
}

}  // namespace
}  // namespace gift::server::reducer_internal
