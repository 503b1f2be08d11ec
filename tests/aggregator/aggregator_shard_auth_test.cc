// The aggregator shard's data-plane authentication (aggregator_shard.h,
// docs/design.md section 8.2) on the in-process transport: sealed pushes
// are summed and results leave sealed; forged pushes are dropped and counted
// by reason without taking the real rank's place; pushes of an epoch whose
// keys have not come yet are held and checked when they do; kFromFirstEpoch
// follows the first epoch.
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/testing/recording_peer.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;
using dataplane::EpochKeys;
using dataplane::MacKey;
using transport::Message;

constexpr uint64_t kRows = 4, kCols = 128;
constexpr uint32_t kWorld = 3;

MacKey MemberKey(uint8_t seed) {
  MacKey k;
  k.fill(seed);
  return k;
}
MacKey WorkerKey(uint32_t rank, uint64_t epoch) {
  return dataplane::DeriveEpochKey(MemberKey(static_cast<uint8_t>(rank + 1)), epoch).value();
}
MacKey ServerKey(uint64_t epoch) {
  return dataplane::DeriveEpochKey(MemberKey(100), epoch).value();
}

// The server's keys of `epoch`: shard 0, the workers' keys by rank.
std::shared_ptr<const EpochKeys> ServerKeys(uint64_t epoch) {
  auto k = std::make_shared<EpochKeys>();
  k->epoch = epoch;
  k->signer = 0;
  k->own = ServerKey(epoch);
  for (uint32_t r = 0; r < kWorld; ++r) k->peers.push_back(WorkerKey(r, epoch));
  return k;
}

// Waits (up to 20 s) for `done`: deliveries are asynchronous.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 20000 && !done(); ++i) absl::SleepFor(absl::Milliseconds(1));
  return done();
}

using FakeWorker = test::RecordingPeer;

class AggregatorShardAuthTest : public ::testing::Test {
 protected:
  void Start(ShardAuth auth) {
    auto shard = AggregatorShard::Create(
        {.reducer = {.pull_spec = codec::ParseCodecSpec("fp32").value()}, .auth = auth},
        [this](transport::TransportHandlers h) {
          return transport::CreateInprocTransport(&hub_, std::move(h));
        });
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *std::move(shard);
    for (uint32_t r = 0; r < kWorld; ++r) {
      auto w = FakeWorker::Connect(
          [this](transport::TransportHandlers h) {
            return transport::CreateInprocTransport(&hub_, std::move(h));
          },
          shard_->address());
      ASSERT_TRUE(w.ok()) << w.status();
      workers_.push_back(*std::move(w));
    }
  }

  ShardEpoch Epoch(uint64_t epoch, bool keyed) {
    ShardEpoch e{.epoch = epoch};
    for (uint32_t r = 0; r < kWorld; ++r) e.workers.push_back(workers_[r]->transport->address());
    e.chunks = {{{7, 0}, {kRows, kCols}}};
    if (keyed) e.keys = ServerKeys(epoch);
    return e;
  }

  static std::vector<uint8_t> Payload(float value) {
    const std::vector<float> g(kRows * kCols, value);
    auto t =
        codec::EncodedTensor::Create(codec::ParseCodecSpec("fp32").value(), kRows, kCols).value();
    EXPECT_TRUE(codec::Encode(g.data(), t.mutable_view()).ok());
    const uint64_t dims[] = {kRows, kCols};
    return codec::SerializePayload(t.view(), dims).value();
  }

  static ChunkHeader Header(uint32_t rank, uint64_t epoch) {
    return {.kind = ChunkKind::kPush,
            .epoch = epoch,
            .step = 5,
            .tensor_id = 7,
            .chunk_index = 0,
            .rank = rank,
            .world_size = kWorld};
  }

  // Sends `header` bytes + payload from worker `from`'s transport.
  void Send(uint32_t from, absl::Span<const uint8_t> header, const std::vector<uint8_t>& payload) {
    absl::Notification sent;
    ASSERT_TRUE(workers_[from]
                    ->transport
                    ->Send(workers_[from]->peer, header, payload,
                           [&](const absl::Status&) { sent.Notify(); })
                    .ok());
    sent.WaitForNotification();
  }
  // Rank `rank`'s honest push of `value` in `epoch`.
  void Push(uint32_t rank, uint64_t epoch, float value) {
    const auto payload = Payload(value);
    Send(rank,
         dataplane::SealChunk(Header(rank, epoch), rank, payload, WorkerKey(rank, epoch)).value(),
         payload);
  }

  // The average every worker got, checked as a worker does: sealed by shard
  // 0 with its key of `epoch`.
  void ExpectSealedResult(uint64_t epoch, float average) {
    for (uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(workers_[r]->WaitFor(1));
      const Message m = workers_[r]->Received().back();
      auto h = dataplane::ParseChunkHeader(m.header);
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_EQ(h->kind, ChunkKind::kResult);
      EpochKeys mine{
          .epoch = epoch, .signer = r, .own = WorkerKey(r, epoch), .peers = {ServerKey(epoch)}};
      EXPECT_EQ(dataplane::CheckChunk(mine, *h, m.header, m.payload), std::nullopt);
      auto parsed = codec::ParsePayload(m.payload);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      std::vector<float> out(kRows * kCols);
      ASSERT_TRUE(codec::Decode(parsed->view, out.data()).ok());
      for (float x : out) ASSERT_EQ(x, average);
    }
  }

  transport::InprocHub hub_;
  std::unique_ptr<AggregatorShard> shard_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(AggregatorShardAuthTest, ForgedPushesAreDroppedAndTheRealRanksAreSummed) {
  Start(ShardAuth::kOn);
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, true)).ok());
  const auto huge = Payload(1000.0f);
  // Claims of rank 0 sent first from worker 2's connection: unsealed, a key
  // of its own, rank 2's key under signer 0, rank 2's honest signer.
  MacKey stranger;
  stranger.fill(0xee);
  Send(2, dataplane::SerializeChunkHeader(Header(0, 1)), huge);
  Send(2, dataplane::SealChunk(Header(0, 1), 0, huge, stranger).value(), huge);
  Send(2, dataplane::SealChunk(Header(0, 1), 0, huge, WorkerKey(2, 1)).value(), huge);
  Send(2, dataplane::SealChunk(Header(0, 1), 2, huge, WorkerKey(2, 1)).value(), huge);
  // A real push whose payload was altered after sealing.
  {
    const auto payload = Payload(1.0f);
    auto sealed = dataplane::SealChunk(Header(1, 1), 1, payload, WorkerKey(1, 1)).value();
    Send(1, sealed, Payload(1000.0f));
  }
  ASSERT_TRUE(Eventually([&] { return shard_->rejections()["UNAUTHENTICATED"] == 5; }));
  auto failures = shard_->auth_failures();
  EXPECT_EQ(failures["missing"], 1u);
  EXPECT_EQ(failures["bad_mac"], 3u);
  EXPECT_EQ(failures["wrong_signer"], 1u);
  EXPECT_EQ(failures["unknown_key"], 0u);
  EXPECT_EQ(shard_->rejections()["UNAUTHENTICATED"], 5u);
  EXPECT_EQ(shard_->counters().pushes_accepted, 0u);
  // The real pushes: 1, 2, 3 -> average 2, sealed by the shard.
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 1, static_cast<float>(r + 1));
  ExpectSealedResult(1, 2.0f);
  EXPECT_EQ(shard_->counters().pushes_accepted, kWorld);
}

TEST_F(AggregatorShardAuthTest, FailuresAreReportedAtMostOncePerIntervalPerReason) {
  std::vector<uint64_t> unreported;
  absl::Mutex mu;
  auto shard =
      AggregatorShard::Create({.reducer = {.pull_spec = codec::ParseCodecSpec("fp32").value()},
                               .auth = ShardAuth::kOn,
                               .on_auth_failure =
                                   [&](const absl::Status& why, transport::PeerId, uint64_t n) {
                                     EXPECT_EQ(why.code(), absl::StatusCode::kUnauthenticated);
                                     absl::MutexLock lock(&mu);
                                     unreported.push_back(n);
                                   },
                               .auth_report_interval = absl::Hours(1)},
                              [this](transport::TransportHandlers h) {
                                return transport::CreateInprocTransport(&hub_, std::move(h));
                              });
  ASSERT_TRUE(shard.ok());
  auto t = transport::CreateInprocTransport(&hub_, {.on_receive = [](Message) {}});
  ASSERT_TRUE(t.ok());
  auto peer = (*t)->Connect((*shard)->address());
  ASSERT_TRUE(peer.ok());
  ShardEpoch e{.epoch = 1, .workers = {(*t)->address()}, .keys = ServerKeys(1)};
  e.chunks = {{{7, 0}, {kRows, kCols}}};
  ASSERT_TRUE((*shard)->SetEpoch(e).ok());
  const auto payload = Payload(1.0f);
  ChunkHeader h = Header(0, 1);
  h.world_size = 1;
  const auto unsealed = dataplane::SerializeChunkHeader(h);
  for (int i = 0; i < 5; ++i) {
    absl::Notification sent;
    ASSERT_TRUE(
        (*t)->Send(*peer, unsealed, payload, [&](const absl::Status&) { sent.Notify(); }).ok());
    sent.WaitForNotification();
  }
  ASSERT_TRUE(Eventually([&] { return (*shard)->auth_failures()["missing"] == 5; }));
  absl::MutexLock lock(&mu);
  // Five failures within the interval: the first reported, four held back.
  ASSERT_EQ(unreported.size(), 1u);
  EXPECT_EQ(unreported[0], 0u);
}

TEST_F(AggregatorShardAuthTest, PushesOfAnEpochWithoutKeysYetAreHeldAndCheckedLater) {
  Start(ShardAuth::kOn);
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, true)).ok());
  // The workers moved to epoch 2 first; a forgery for epoch 2 too.
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 2, 4.0f);
  const auto huge = Payload(1000.0f);
  MacKey stranger;
  stranger.fill(0xee);
  Send(0, dataplane::SealChunk(Header(0, 2), 0, huge, stranger).value(), huge);
  ASSERT_TRUE(Eventually([&] { return shard_->deferred_pushes() == kWorld + 1; }));
  EXPECT_EQ(shard_->counters().pushes_accepted, 0u);
  EXPECT_EQ(shard_->auth_failures()["bad_mac"], 0u);  // not checked yet
  ASSERT_TRUE(shard_->SetEpoch(Epoch(2, true)).ok());
  ExpectSealedResult(2, 4.0f);
  EXPECT_EQ(shard_->auth_failures()["bad_mac"], 1u);
  EXPECT_EQ(shard_->counters().pushes_accepted, kWorld);
}

TEST_F(AggregatorShardAuthTest, PushesOfAWorkerWhoseKeyIsNotHereYetAreHeldUntilItIs) {
  // The epoch's keys lack rank 2's (its fetch failed, or ran under the
  // identity a re-join replaced): its push is held, not refused, and
  // counted once the same epoch's keys with it are applied.
  Start(ShardAuth::kOn);
  ShardEpoch lacking = Epoch(1, true);
  auto keys = std::make_shared<EpochKeys>(*lacking.keys);
  keys->peers[2].reset();
  lacking.keys = keys;
  ASSERT_TRUE(shard_->SetEpoch(lacking).ok());
  for (uint32_t r = 0; r < kWorld; ++r) Push(r, 1, static_cast<float>(r + 1));
  ASSERT_TRUE(Eventually([&] { return shard_->counters().pushes_accepted == 2; }));
  ASSERT_TRUE(Eventually([&] { return shard_->deferred_pushes() == 1; }));
  EXPECT_EQ(shard_->auth_failures()["unknown_key"], 0u);
  ASSERT_TRUE(shard_->Apply(Epoch(1, true)).ok());
  ExpectSealedResult(1, 2.0f);
  EXPECT_EQ(shard_->counters().pushes_accepted, kWorld);
  EXPECT_EQ(shard_->deferred_pushes(), 0u);
  EXPECT_EQ(shard_->auth_failures()["unknown_key"], 0u);
}

TEST_F(AggregatorShardAuthTest, AnEpochWithoutKeysIsRefusedOnceOn) {
  Start(ShardAuth::kOn);
  EXPECT_EQ(shard_->SetEpoch(Epoch(1, false)).code(), absl::StatusCode::kInvalidArgument);
  ShardEpoch wrong = Epoch(1, false);
  wrong.keys = ServerKeys(2);
  EXPECT_EQ(shard_->SetEpoch(wrong).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AggregatorShardAuthTest, FromFirstEpochFollowsTheFirstEpoch) {
  Start(ShardAuth::kFromFirstEpoch);
  // Before any epoch every push is held: nothing is decided yet.
  for (uint32_t r = 0; r < kWorld; ++r) {
    const auto payload = Payload(3.0f);
    Send(r, dataplane::SerializeChunkHeader(Header(r, 1)), payload);
  }
  ASSERT_TRUE(Eventually([&] { return shard_->deferred_pushes() == kWorld; }));
  EXPECT_EQ(shard_->counters().pushes_accepted, 0u);
  // No keys: authentication is off, the held pushes are summed, results
  // leave unsealed.
  ASSERT_TRUE(shard_->SetEpoch(Epoch(1, false)).ok());
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(workers_[r]->WaitFor(1));
    EXPECT_FALSE(dataplane::IsSealedChunkHeader(workers_[r]->Received()[0].header));
  }
  EXPECT_EQ(shard_->counters().pushes_accepted, kWorld);
  // An epoch with keys switches it on for good.
  ASSERT_TRUE(shard_->SetEpoch(Epoch(2, true)).ok());
  const auto payload = Payload(3.0f);
  Send(0, dataplane::SerializeChunkHeader(Header(0, 2)), payload);
  EXPECT_TRUE(Eventually([&] { return shard_->auth_failures()["missing"] == 1; }));
  EXPECT_EQ(shard_->SetEpoch(Epoch(3, false)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::server
