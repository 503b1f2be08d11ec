// The device stage's encode-ahead bookkeeping (worker/cuda/encode_schedule.h):
// which slot each call uses, which encodes are enqueued ahead and when,
// when a prediction serves its call and when it is thrown away. The stage
// reads the non-finite check of slot k after event k (device_codec_stage.h),
// so "the slot of call k is k, and an encode ahead into slot j is only ever
// named for the chunk in position j" is what keeps a chunk's check its own.
#include "worker/cuda/encode_schedule.h"

#include <cstdint>
#include <vector>

#include "common/codec/codec_spec.h"
#include "gtest/gtest.h"

namespace gift::worker {
namespace {

// A send arena's worth of chunks: chunk k has its codes at arena + 100 k
// (40 bytes) and its scales after them (8 bytes), offset 64 k, key of step.
std::vector<ChunkEncode> Step(uint8_t* arena, size_t chunks, uint64_t step, uint32_t rank = 0) {
  std::vector<ChunkEncode> calls;
  for (size_t k = 0; k < chunks; ++k) {
    ChunkEncode c;
    c.offset = 64 * k;
    c.view.spec = codec::CodecSpec{codec::Format::kE4M3, codec::Scaling::kPerBlockFp32, 32,
                                   codec::Rounding::kStochastic};
    c.view.rows = 1;
    c.view.cols = 64;
    c.view.codes = arena + 100 * k;
    c.view.scales = arena + 100 * k + 40;
    c.code_bytes = 40;
    c.scale_bytes = 8;
    c.key = {.tensor = (uint64_t{9} << 24) | k, .step = step, .rank = rank};
    calls.push_back(c);
  }
  return calls;
}

// Step `step` of `chunks` chunks on `arena`, then the start of the next.
void Learn(EncodeSchedule& s, uint8_t* arena, size_t chunks, uint64_t step = 1) {
  s.StartStep();
  for (const ChunkEncode& c : Step(arena, chunks, step)) s.Next(c);
  s.StartStep();
}

std::vector<size_t> Slots(const EncodeSchedule::Plan& plan) {
  std::vector<size_t> slots;
  for (const auto& a : plan.ahead) slots.push_back(a.slot);
  return slots;
}

TEST(EncodeScheduleTest, TheFirstStepOnAnArenaEncodesEveryChunkAtItsCall) {
  uint8_t arena[1000];
  EncodeSchedule s(2);
  s.Forget();
  s.StartStep();
  const auto calls = Step(arena, 5, 1);
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto plan = s.Next(calls[k]);
    EXPECT_EQ(plan.slot, k);
    EXPECT_TRUE(plan.encode);
    EXPECT_TRUE(plan.ahead.empty());
  }
}

TEST(EncodeScheduleTest, LaterStepsEncodeAheadAndEachPredictionServesItsOwnChunk) {
  uint8_t arena[1000];
  EncodeSchedule s(2);
  s.StartStep();
  for (const ChunkEncode& c : Step(arena, 5, 1)) s.Next(c);
  for (uint64_t step = 2; step <= 4; ++step) {
    s.StartStep();
    const auto calls = Step(arena, 5, step);
    // Call 0: encoded now (nothing predicts chunk 0), then 1 and 2 ahead.
    auto plan = s.Next(calls[0]);
    EXPECT_EQ(plan.slot, 0u);
    EXPECT_TRUE(plan.encode);
    EXPECT_EQ(Slots(plan), (std::vector<size_t>{1, 2}));
    for (const auto& a : plan.ahead) {
      EXPECT_TRUE(SameEncode(a.call, calls[a.slot])) << "slot " << a.slot << " step " << step;
    }
    // Calls 1..4: each was enqueued ahead; each names one new chunk ahead
    // until the previous step's chunks run out.
    const std::vector<std::vector<size_t>> ahead = {{3}, {4}, {}, {}};
    for (size_t k = 1; k < calls.size(); ++k) {
      plan = s.Next(calls[k]);
      EXPECT_EQ(plan.slot, k);
      EXPECT_FALSE(plan.encode) << "chunk " << k << " step " << step;
      EXPECT_EQ(Slots(plan), ahead[k - 1]) << "chunk " << k;
      for (const auto& a : plan.ahead) EXPECT_TRUE(SameEncode(a.call, calls[a.slot]));
    }
  }
}

TEST(EncodeScheduleTest, ADifferentCallIsEncodedAtItsCallAndEndsPredictionForTheStep) {
  uint8_t arena[1000];
  EncodeSchedule s(3);
  Learn(s, arena, 6);
  auto calls = Step(arena, 6, 2);
  calls[2].key.rank = 1;  // e.g. a new rank after a membership change
  EXPECT_EQ(Slots(s.Next(calls[0])), (std::vector<size_t>{1, 2, 3}));
  EXPECT_FALSE(s.Next(calls[1]).encode);  // its prediction holds
  const auto plan = s.Next(calls[2]);
  EXPECT_TRUE(plan.encode) << "the prediction for chunk 2 had rank 0";
  EXPECT_TRUE(plan.ahead.empty());
  for (size_t k = 3; k < calls.size(); ++k) {
    const auto later = s.Next(calls[k]);
    EXPECT_TRUE(later.encode) << "chunk " << k << ": predictions past a difference are dropped";
    EXPECT_TRUE(later.ahead.empty());
  }
  // The next step predicts from this one's calls: rank 1 for chunk 2.
  s.StartStep();
  auto next = Step(arena, 6, 3);
  next[2].key.rank = 1;
  s.Next(next[0]);
  EXPECT_FALSE(s.Next(next[1]).encode);
  EXPECT_FALSE(s.Next(next[2]).encode);
}

TEST(EncodeScheduleTest, OnlyTheStepFieldOfTheKeyIsCarriedOver) {
  uint8_t arena[1000];
  EncodeSchedule s(1);
  Learn(s, arena, 2, 10);
  auto calls = Step(arena, 2, 11);
  const auto plan = s.Next(calls[0]);
  ASSERT_EQ(plan.ahead.size(), 1u);
  EXPECT_EQ(plan.ahead[0].call.key.step, 11u);
  calls[1].offset += 1;  // same buffers, another part of the tensor
  EXPECT_TRUE(s.Next(calls[1]).encode);
}

TEST(EncodeScheduleTest, AShorterFailedStepAndAnArenaChangeAreHandled) {
  uint8_t arena[1000];
  EncodeSchedule s(2);
  // Step 2 fails after chunk 1 (the engine stops calling): predictions of
  // 2 and 3 were made, and are dropped by the next StartStep.
  Learn(s, arena, 4);
  auto calls = Step(arena, 4, 2);
  EXPECT_EQ(Slots(s.Next(calls[0])), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(Slots(s.Next(calls[1])), (std::vector<size_t>{3}));
  // Step 3 predicts only what step 2 called: chunk 1.
  s.StartStep();
  calls = Step(arena, 4, 3);
  EXPECT_EQ(Slots(s.Next(calls[0])), (std::vector<size_t>{1}));
  EXPECT_FALSE(s.Next(calls[1]).encode);
  EXPECT_TRUE(s.Next(calls[2]).encode);
  EXPECT_TRUE(s.Next(calls[3]).encode);
  // A new arena: nothing predicted from the old one.
  s.Forget();
  s.StartStep();
  EXPECT_TRUE(s.Next(calls[0]).ahead.empty());
}

TEST(EncodeScheduleTest, AnEncodeAheadNotEnqueuedIsEncodedAtItsCall) {
  uint8_t arena[1000];
  EncodeSchedule s(2);
  Learn(s, arena, 4);
  const auto calls = Step(arena, 4, 2);
  EXPECT_EQ(Slots(s.Next(calls[0])), (std::vector<size_t>{1, 2}));
  s.NotEnqueued(1);  // the stage failed to enqueue slot 1 (and so 2 after it)
  const auto plan = s.Next(calls[1]);
  EXPECT_TRUE(plan.encode);
  EXPECT_EQ(Slots(plan), (std::vector<size_t>{2, 3})) << "named again, since not enqueued";
  EXPECT_FALSE(s.Next(calls[2]).encode);
}

TEST(EncodeScheduleTest, OverlappingChunksAreNeverPredicted) {
  uint8_t arena[1000];
  EncodeSchedule s(2);
  s.StartStep();
  auto calls = Step(arena, 3, 1);
  calls[2].view.codes = calls[1].view.scales;  // shares chunk 1's bytes
  for (const ChunkEncode& c : calls) s.Next(c);
  s.StartStep();
  EXPECT_TRUE(s.Next(calls[0]).ahead.empty());
}

TEST(EncodeScheduleTest, ZeroAheadNeverPredicts) {
  uint8_t arena[1000];
  EncodeSchedule s(0);
  for (uint64_t step = 1; step <= 2; ++step) {
    s.StartStep();
    for (const ChunkEncode& c : Step(arena, 3, step)) {
      const auto plan = s.Next(c);
      EXPECT_TRUE(plan.encode);
      EXPECT_TRUE(plan.ahead.empty());
    }
  }
}

}  // namespace
}  // namespace gift::worker
