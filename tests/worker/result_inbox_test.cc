// The ResultInbox's two jobs on their own (issue 50): a step's results
// (filed into the slots the step waits for; strays, server aborts, failed
// servers and newer epochs; an abort after every result is in does not fail
// the step) and, in NodeContributions, the node group's contributions held
// for a leader (by step, dropped with their epoch, bounded in bytes, waking a
// waiting leader).
#include "worker/engine/result_inbox.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/dataplane/chunk_header.h"
#include "gtest/gtest.h"
#include "worker/engine/node_contributions.h"
#include "worker/engine/tensor_buffers.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

transport::Message MessageOf(const ChunkHeader& header, std::vector<uint8_t> payload,
                             transport::PeerId from = 1) {
  transport::Message m;
  m.from = from;
  const auto bytes = dataplane::SerializeChunkHeader(header);
  m.header.assign(bytes.begin(), bytes.end());
  m.payload = std::move(payload);
  return m;
}

ChunkHeader Header(ChunkKind kind, uint64_t epoch, uint64_t step, uint64_t tensor,
                   uint32_t chunk) {
  return ChunkHeader{.kind = kind,
                     .epoch = epoch,
                     .step = step,
                     .tensor_id = tensor,
                     .chunk_index = chunk,
                     .rank = 0,
                     .world_size = 2};
}

// ---- NodeContributions ------------------------------------------------------

TEST(NodeContributionsTest, HeldByStepTakenOnceAndDroppedWithTheirEpoch) {
  NodeContributions held;
  EXPECT_FALSE(held.unseen());
  auto m1 = MessageOf(Header(ChunkKind::kNodeMember, 2, 5, 7, 0), {1, 2, 3});
  auto m2 = MessageOf(Header(ChunkKind::kNodeMember, 2, 6, 7, 0), {4, 5});  // a step ahead
  auto m3 = MessageOf(Header(ChunkKind::kNodeMember, 3, 5, 7, 1), {6});      // the next epoch
  ASSERT_TRUE(held.Hold(Header(ChunkKind::kNodeMember, 2, 5, 7, 0), m1, 2));
  ASSERT_TRUE(held.Hold(Header(ChunkKind::kNodeMember, 2, 6, 7, 0), m2, 2));
  ASSERT_TRUE(held.Hold(Header(ChunkKind::kNodeMember, 3, 5, 7, 1), m3, std::nullopt));
  EXPECT_TRUE(held.unseen());
  EXPECT_EQ(held.bytes(), 6u);
  std::vector<NodeContribution> step5 = held.Take(2, 5);
  ASSERT_EQ(step5.size(), 1u);
  EXPECT_EQ(step5[0].payload, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(step5[0].header_bytes, m1.header);
  EXPECT_FALSE(held.unseen());
  EXPECT_TRUE(held.Take(2, 5).empty());  // once
  EXPECT_EQ(held.bytes(), 3u);
  // A step of epoch 3 opens: epoch 2's will never be summed.
  held.DropEpochsBefore(3);
  EXPECT_EQ(held.size(), 1u);
  EXPECT_EQ(held.bytes(), 1u);
  EXPECT_EQ(held.Take(3, 5).size(), 1u);
  // An ended epoch's contribution is not held while a later step is open.
  auto late = MessageOf(Header(ChunkKind::kNodeMember, 2, 7, 7, 0), {9});
  EXPECT_FALSE(held.Hold(Header(ChunkKind::kNodeMember, 2, 7, 7, 0), late, 3));
  EXPECT_FALSE(held.unseen());
  held.Wake();
  EXPECT_TRUE(held.unseen());
  held.MarkSeen();
  EXPECT_FALSE(held.unseen());
}

TEST(NodeContributionsTest, BoundedInBytesAndMatesForgottenOnce) {
  NodeContributions held(/*max_bytes=*/8);
  auto a = MessageOf(Header(ChunkKind::kNodeMember, 1, 1, 7, 0), std::vector<uint8_t>(6));
  auto b = MessageOf(Header(ChunkKind::kNodeMember, 1, 1, 7, 1), std::vector<uint8_t>(3));
  EXPECT_TRUE(held.Hold(Header(ChunkKind::kNodeMember, 1, 1, 7, 0), a, 1));
  EXPECT_FALSE(held.Hold(Header(ChunkKind::kNodeMember, 1, 1, 7, 1), b, 1));  // 9 > 8
  EXPECT_EQ(held.bytes(), 6u);
  held.AddMate(42);
  EXPECT_TRUE(held.IsMate(42));
  EXPECT_TRUE(held.ForgetMate(42));
  EXPECT_FALSE(held.ForgetMate(42));
  EXPECT_FALSE(held.IsMate(42));
}

// ---- ResultInbox: a step's results ------------------------------------------

class ResultInboxTest : public ::testing::Test {
 protected:
  ResultInboxTest() {
    for (uint32_t i = 0; i < 2; ++i) {
      slots_[i].index = i;
      slots_[i].tensor_id = 7;
      slot_ptrs_.push_back(&slots_[i]);
    }
  }

  void Open(uint64_t epoch, uint64_t step) {
    inbox_.Open(epoch, step, ++run_, nullptr, /*node_step=*/false);
    ASSERT_TRUE(inbox_.Expect(slot_ptrs_, absl::Seconds(1)));
    inbox_.ExpectNoMore();
  }

  void Result(uint64_t epoch, uint64_t step, uint32_t chunk, std::vector<uint8_t> bytes = {1}) {
    inbox_.OnMessage(MessageOf(Header(ChunkKind::kResult, epoch, step, 7, chunk), bytes));
  }

  absl::StatusOr<bool> TakeNow(std::vector<ChunkSlot*>& ready) {
    return inbox_.Take(/*wait=*/false, absl::InfiniteFuture(), ready);
  }

  ResultInbox inbox_;
  ChunkSlot slots_[2];
  std::vector<ChunkSlot*> slot_ptrs_;
  uint64_t run_ = 0;
};

TEST_F(ResultInboxTest, ResultsOfTheStepAreFiledOnceAndEverythingElseIsAStray) {
  Open(3, 10);
  EXPECT_EQ(inbox_.missing(), 2u);
  Result(3, 10, 1, {5, 6});
  Result(3, 10, 1);       // a duplicate
  Result(3, 9, 0);        // another step
  Result(2, 10, 0);       // another epoch
  inbox_.OnMessage(MessageOf(Header(ChunkKind::kResult, 3, 10, 8, 0), {1}));  // another tensor
  EXPECT_EQ(inbox_.stray_messages(), 4u);
  std::vector<ChunkSlot*> ready;
  ASSERT_TRUE(TakeNow(ready).ok());
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], &slots_[1]);
  EXPECT_EQ(std::vector<uint8_t>(ready[0]->result_bytes_view().begin(),
                                 ready[0]->result_bytes_view().end()),
            (std::vector<uint8_t>{5, 6}));
  EXPECT_FALSE(inbox_.complete());
  // A waiting Take wakes for the last one.
  std::thread late([this] {
    absl::SleepFor(absl::Milliseconds(50));
    Result(3, 10, 0);
  });
  auto woken = inbox_.Take(/*wait=*/true, absl::Now() + absl::Seconds(5), ready);
  late.join();
  ASSERT_TRUE(woken.ok());
  EXPECT_TRUE(*woken);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(inbox_.complete());
  inbox_.Close(slot_ptrs_);
  Result(3, 10, 0);  // after the step: a stray
  EXPECT_EQ(inbox_.stray_messages(), 5u);
}

TEST_F(ResultInboxTest, AServersAbortEndsTheStepUnlessEveryResultIsIn) {
  Open(3, 10);
  Result(3, 10, 0);
  std::string why = "rank 1 left";
  inbox_.OnMessage(MessageOf(Header(ChunkKind::kAbort, 3, 10, 7, 1),
                             std::vector<uint8_t>(why.begin(), why.end())));
  std::vector<ChunkSlot*> ready;
  auto taken = TakeNow(ready);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(taken.status().message().find("rank 1 left"), std::string::npos) << taken.status();
  inbox_.Close(slot_ptrs_);

  // Every result in first: a late abort (this worker saw a newer epoch)
  // does not fail the step.
  Open(3, 11);
  Result(3, 11, 0);
  Result(3, 11, 1);
  inbox_.AbortEpochsBefore(4, "epoch 4 began");
  auto done = TakeNow(ready);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(ready.size(), 2u);
  EXPECT_TRUE(inbox_.complete());
  inbox_.Close(slot_ptrs_);
}

TEST_F(ResultInboxTest, AFailedServerEndsTheStepOnlyWhenTheStepUsesIt) {
  Open(3, 10);
  ASSERT_TRUE(inbox_.UseServer(/*peer=*/11, "server-a").ok());
  inbox_.OnPeerFailure(/*peer=*/12, absl::UnavailableError("gone"));  // not this step's
  std::vector<ChunkSlot*> ready;
  EXPECT_TRUE(TakeNow(ready).ok());
  inbox_.OnPeerFailure(/*peer=*/11, absl::UnavailableError("connection reset"));
  auto taken = TakeNow(ready);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find("server-a"), std::string::npos) << taken.status();
  EXPECT_EQ(inbox_.peer_failures(), 2u);
  EXPECT_EQ(inbox_.peer_failures_that_aborted(), 1u);
  inbox_.Close(slot_ptrs_);
  // A failed connection cannot be used by a later step.
  Open(3, 11);
  EXPECT_EQ(inbox_.UseServer(11, "server-a").code(), absl::StatusCode::kUnavailable);
  // A node mate's failure is not a server's.
  inbox_.UseNodeMate(13);
  inbox_.OnPeerFailure(13, absl::UnavailableError("mate died"));
  EXPECT_EQ(inbox_.peer_failures(), 2u);
  inbox_.Close(slot_ptrs_);
}

TEST_F(ResultInboxTest, AStepPlannedFromAReplacedStateOpensAborted) {
  inbox_.AbortEpochsBefore(5, "epoch 5 began");
  Open(4, 10);
  std::vector<ChunkSlot*> ready;
  auto taken = TakeNow(ready);
  EXPECT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("epoch 5 began"), std::string::npos) << taken.status();
  inbox_.Close(slot_ptrs_);
}

TEST_F(ResultInboxTest, ANodeLeadersTakeWakesForAContributionOfItsStep) {
  inbox_.Open(3, 10, ++run_, nullptr, /*node_step=*/true);
  ASSERT_TRUE(inbox_.Expect(slot_ptrs_, absl::Seconds(1)));
  std::vector<ChunkSlot*> ready;
  // Opening a node step wakes the first Take (to file what was held).
  auto first = inbox_.Take(/*wait=*/true, absl::Now() + absl::Seconds(5), ready);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(inbox_.TakeNodeContributions(3, 10).empty());
  std::thread member([this] {
    absl::SleepFor(absl::Milliseconds(50));
    inbox_.OnMessage(MessageOf(Header(ChunkKind::kNodeMember, 3, 10, 7, 0), {1, 2, 3, 4}, 9));
  });
  auto woken = inbox_.Take(/*wait=*/true, absl::Now() + absl::Seconds(5), ready);
  member.join();
  ASSERT_TRUE(woken.ok());
  EXPECT_TRUE(*woken);
  EXPECT_TRUE(ready.empty());  // no result: a contribution
  std::vector<NodeContribution> got = inbox_.TakeNodeContributions(3, 10);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload.size(), 4u);
  EXPECT_EQ(inbox_.stray_messages(), 0u);
  inbox_.Close(slot_ptrs_);
}

}  // namespace
}  // namespace gift::worker
