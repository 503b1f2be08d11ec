// The aggregator shard on real transports: in-process and UCX (loopback).
#include "server/aggregator/aggregator_shard.h"

#include <random>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/transport/inproc/inproc_transport.h"
#include "common/transport/ucx/ucx_transport.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/recording_peer.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;
using transport::Message;

constexpr uint64_t kRows = 4, kCols = 128;
constexpr uint32_t kWorld = 4;

// A worker's end: its transport and what it received.
using FakeWorker = test::RecordingPeer;

class AggregatorShardTest : public ::testing::TestWithParam<bool /*ucx*/> {
 protected:
  absl::StatusOr<std::unique_ptr<transport::Transport>> MakeTransport(
      transport::TransportHandlers handlers) {
    if (GetParam()) return transport::CreateUcxTransport(std::move(handlers));
    return transport::CreateInprocTransport(&hub_, std::move(handlers));
  }

  void SetUp() override {
    AggregatorShardOptions options{.reducer = {.pull_spec = codec::ParseCodecSpec("bf16").value()}};
    options.on_step_aborted = [this](uint64_t epoch, uint64_t by, const IncompleteStep& step) {
      absl::MutexLock lock(&failures_mu_);
      aborted_steps_.push_back(absl::StrCat("epoch ", epoch, " by ", by, ": step ", step.step, ", ",
                                            step.chunks, " chunks, ",
                                            DescribeRanks(step.missing_ranks)));
    };
    options.on_send_failure = [this](uint32_t rank, const ChunkHeader& chunk, const absl::Status&,
                                     uint64_t unreported) {
      absl::MutexLock lock(&failures_mu_);
      send_failures_.push_back({rank, chunk.step, unreported});
    };
    auto shard = AggregatorShard::Create(
        options, [this](transport::TransportHandlers h) { return MakeTransport(std::move(h)); });
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *std::move(shard);
    for (uint32_t r = 0; r < kWorld; ++r) {
      auto w = FakeWorker::Connect(
          [this](transport::TransportHandlers h) { return MakeTransport(std::move(h)); },
          shard_->address());
      ASSERT_TRUE(w.ok()) << w.status();
      peers_.push_back((*w)->peer);
      workers_.push_back(*std::move(w));
    }
  }

  ShardEpoch Epoch(uint64_t epoch, uint32_t world) {
    ShardEpoch e{.epoch = epoch};
    for (uint32_t r = 0; r < world; ++r) e.workers.push_back(workers_[r]->transport->address());
    e.chunks = {{{7, 0}, {kRows, kCols}}};
    return e;
  }

  std::vector<uint8_t> Payload(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> g(kRows * kCols);
    for (float& x : g) x = normal(rng);
    auto t =
        codec::EncodedTensor::Create(codec::ParseCodecSpec("e4m3/block128").value(), kRows, kCols)
            .value();
    EXPECT_TRUE(codec::Encode(g.data(), t.mutable_view()).ok());
    const uint64_t dims[] = {kRows, kCols};
    return codec::SerializePayload(t.view(), dims).value();
  }

  void Push(uint32_t rank, uint64_t epoch, uint64_t step, uint32_t world,
            const std::vector<uint8_t>& payload) {
    const ChunkHeader h{.kind = ChunkKind::kPush,
                        .epoch = epoch,
                        .step = step,
                        .tensor_id = 7,
                        .basis_version = 0,
                        .chunk_index = 0,
                        .rank = rank,
                        .world_size = world};
    const auto bytes = dataplane::SerializeChunkHeader(h);
    absl::Notification sent;
    ASSERT_TRUE(workers_[rank]
                    ->transport
                    ->Send(peers_[rank], bytes, payload,
                           [&](const absl::Status& s) {
                             EXPECT_TRUE(s.ok()) << s;
                             sent.Notify();
                           })
                    .ok());
    sent.WaitForNotification();
  }

  struct SendFailure {
    uint32_t rank;
    uint64_t step;
    uint64_t unreported;
  };
  absl::Mutex failures_mu_;
  std::vector<SendFailure> send_failures_ ABSL_GUARDED_BY(failures_mu_);
  std::vector<std::string> aborted_steps_ ABSL_GUARDED_BY(failures_mu_);

  transport::InprocHub hub_;
  std::unique_ptr<AggregatorShard> shard_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::vector<transport::PeerId> peers_;
};

TEST_P(AggregatorShardTest, EveryWorkerReceivesTheSameResult) {
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, kWorld)).ok());
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 1, 10, kWorld, Payload(r));
  for (auto& w : workers_) ASSERT_TRUE(w->WaitFor(1));
  const std::vector<uint8_t> first = workers_[0]->Received()[0].payload;
  for (auto& w : workers_) {
    const Message m = w->Received()[0];
    auto h = dataplane::ParseChunkHeader(m.header);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->kind, ChunkKind::kResult);
    EXPECT_EQ(h->ranks_summed(), kWorld);
    EXPECT_EQ(h->step, 10u);
    EXPECT_EQ(m.payload, first);
    EXPECT_TRUE(codec::ParsePayload(m.payload).ok());
  }
  const auto c = shard_->counters();
  EXPECT_EQ(c.pushes_accepted, kWorld);
  EXPECT_EQ(c.chunks_completed, 1u);
}

TEST_P(AggregatorShardTest, AResultThatCannotReachAWorkerIsReportedWithItsRank) {
  // Rank 3's address is a worker that has gone: the shard cannot send it
  // the result (no connection, or a send that fails), and says so.
  ShardEpoch epoch = Epoch(1, kWorld);
  {
    auto gone = FakeWorker::Connect(
        [this](transport::TransportHandlers h) { return MakeTransport(std::move(h)); },
        shard_->address());
    ASSERT_TRUE(gone.ok()) << gone.status();
    epoch.workers[3] = (*gone)->transport->address();
  }
  (void)shard_->SetEpoch(epoch);  // Unavailable when the connect fails at once
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 1, 10, kWorld, Payload(r));
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(workers_[r]->WaitFor(1)) << r;
  auto reported = [this] {
    absl::MutexLock lock(&failures_mu_);
    return !send_failures_.empty();
  };
  for (int i = 0; i < 2000 && !reported(); ++i) absl::SleepFor(absl::Milliseconds(5));
  absl::MutexLock lock(&failures_mu_);
  ASSERT_EQ(send_failures_.size(), 1u);
  EXPECT_EQ(send_failures_[0].rank, 3u);
  EXPECT_EQ(send_failures_[0].step, 10u);
  EXPECT_EQ(send_failures_[0].unreported, 0u);
  EXPECT_EQ(shard_->counters().send_failures, 1u);
}

TEST_P(AggregatorShardTest, MalformedMessagesAreCountedAndDropped) {
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, kWorld)).ok());
  absl::Notification sent;
  const std::vector<uint8_t> junk = {1, 2, 3};
  ASSERT_TRUE(
      workers_[0]
          ->transport->Send(peers_[0], junk, junk, [&](const absl::Status&) { sent.Notify(); })
          .ok());
  sent.WaitForNotification();
  Push(0, /*epoch=*/0, 1, kWorld, Payload(0));  // an epoch that ended
  // Still serving: a full step completes.
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 1, 2, kWorld, Payload(r));
  for (auto& w : workers_) ASSERT_TRUE(w->WaitFor(1));
  const auto rejections = shard_->rejections();
  EXPECT_EQ(rejections.at("INVALID_ARGUMENT"), 1u);
  EXPECT_EQ(rejections.at("FAILED_PRECONDITION"), 1u);
}

TEST_P(AggregatorShardTest, ANewEpochAbortsTheIncompleteStep) {
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, kWorld)).ok());
  Push(0, 1, 5, kWorld, Payload(0));
  Push(1, 1, 5, kWorld, Payload(1));
  // A completed send means the transport took the bytes, not that the shard
  // has handled them: wait until it has.
  for (int i = 0; i < 4000 && shard_->counters().pushes_accepted < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(shard_->counters().pushes_accepted, 2u);
  // Rank 3 leaves: epoch 2 with three workers.
  ASSERT_TRUE(shard_->SetEpoch(Epoch(2, 3)).ok());
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(workers_[r]->WaitFor(1)) << r;
    auto h = dataplane::ParseChunkHeader(workers_[r]->Received()[0].header);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->kind, ChunkKind::kAbort);
    EXPECT_EQ(h->epoch, 1u);
    EXPECT_EQ(h->step, 5u);
    // The reason names the ranks the step still waited for here.
    const transport::Message abort = workers_[r]->Received()[0];
    const absl::Span<const uint8_t> why = abort.bytes();
    EXPECT_EQ(std::string(why.begin(), why.end()),
              "epoch 2 replaced epoch 1 before the step completed; this server still waited for "
              "ranks 2, 3 (1 chunk)");
  }
  {
    absl::MutexLock lock(&failures_mu_);
    EXPECT_EQ(aborted_steps_, std::vector<std::string>{"epoch 1 by 2: step 5, 1 chunks, ranks 2, 3"});
  }
  // The step is re-sent under epoch 2 and completes for the three.
  for (uint32_t r = 0; r < 3; ++r) Push(r, 2, 5, 3, Payload(r));
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(workers_[r]->WaitFor(2));
    auto h = dataplane::ParseChunkHeader(workers_[r]->Received()[1].header);
    EXPECT_EQ(h->kind, ChunkKind::kResult);
    EXPECT_EQ(h->ranks_summed(), 3u);
  }
  EXPECT_EQ(shard_->counters().chunks_aborted, 1u);
}

TEST_P(AggregatorShardTest, PushesBeforeTheEpochAreServedOnceItArrives) {
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, kWorld)).ok());
  // The workers learned of epoch 2 before this shard did.
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 2, 7, kWorld, Payload(r));
  for (int i = 0; i < 4000 && shard_->deferred_pushes() < kWorld; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(shard_->deferred_pushes(), kWorld);
  EXPECT_EQ(shard_->counters().chunks_completed, 0u);
  ASSERT_TRUE(shard_->SetEpoch(Epoch(2, kWorld)).ok());
  for (auto& w : workers_) {
    ASSERT_TRUE(w->WaitFor(1));
    auto h = dataplane::ParseChunkHeader(w->Received()[0].header);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->kind, ChunkKind::kResult);
    EXPECT_EQ(h->epoch, 2u);
    EXPECT_EQ(h->step, 7u);
  }
  const AggregatorShard::Counters c = shard_->counters();
  EXPECT_EQ(c.chunks_completed, 1u);
  EXPECT_GT(c.reduced_bytes, 0u);
  EXPECT_EQ(shard_->deferred_pushes(), 0u);
  EXPECT_TRUE(shard_->rejections().empty());
}

INSTANTIATE_TEST_SUITE_P(Transports, AggregatorShardTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ucx" : "inproc"; });

}  // namespace
}  // namespace gift::server
