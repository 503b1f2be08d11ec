// A push of an earlier step still in flight to a server that its epoch lost
// (a stopped process whose connection never completes) holds the chunk's
// send buffer. When the next step does not use that server, the engine
// moves the tensor to a fresh send arena and the step goes on, leaving the
// stuck send's bytes untouched until it ends (the regression of the soak's
// 60 s stall: a worker that joined just before a server was stopped waited
// out its step timeout for the send, and every other rank with it). A send
// to a server the step still uses is waited for.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/inproc/inproc_transport.h"
#include "common/transport/transport.h"
#include "gtest/gtest.h"
#include "tests/worker/hand_server.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker {
namespace {

using testing::HandServer;

// The engine's transport with one address cut off: sends on a connection to
// it never complete, as to a stopped process, until Resume (the process goes
// on and takes them) or the connection is closed (they end Cancelled, as
// UCX's forced close does). Resume checks that nobody wrote into a held
// send's payload meanwhile.
class StallingTransport : public transport::Transport {
 public:
  explicit StallingTransport(std::unique_ptr<transport::Transport> inner)
      : inner_(std::move(inner)) {}
  ~StallingTransport() override {
    for (auto& [peer, held] : held_) {
      for (Held& h : held) h.done(absl::CancelledError("transport destroyed"));
    }
  }

  void Stall(const std::string& address) {
    absl::MutexLock lock(&mu_);
    stalled_address_ = address;
  }
  // Waits up to 10 s until `n` sends are held.
  bool AwaitHeld(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HeldLocked() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  size_t held() {
    absl::MutexLock lock(&mu_);
    return HeldLocked();
  }
  // Completes every held send; false when a held payload was overwritten.
  bool Resume() {
    std::vector<Held> resumed;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [peer, held] : held_) {
        for (Held& h : held) resumed.push_back(std::move(h));
      }
      held_.clear();
    }
    bool intact = true;
    for (Held& h : resumed) {
      intact = intact && std::equal(h.bytes.begin(), h.bytes.end(), h.payload.begin());
      h.done(absl::OkStatus());
    }
    return intact;
  }

  std::string address() const override { return inner_->address(); }
  absl::StatusOr<transport::PeerId> Connect(absl::string_view address) override {
    absl::StatusOr<transport::PeerId> peer = inner_->Connect(address);
    absl::MutexLock lock(&mu_);
    if (peer.ok() && address == stalled_address_) stalled_peers_.insert(*peer);
    return peer;
  }
  absl::Status Send(transport::PeerId peer, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, transport::SendCallback done) override {
    {
      absl::MutexLock lock(&mu_);
      if (stalled_peers_.contains(peer)) {
        held_[peer].push_back(
            {payload, std::vector<uint8_t>(payload.begin(), payload.end()), std::move(done)});
        return absl::OkStatus();
      }
    }
    return inner_->Send(peer, header, payload, std::move(done));
  }
  void Disconnect(transport::PeerId peer) override {
    std::vector<Held> cancelled;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = held_.find(peer); it != held_.end()) {
        cancelled = std::move(it->second);
        held_.erase(it);
      }
    }
    for (Held& h : cancelled) h.done(absl::CancelledError("disconnected"));
    inner_->Disconnect(peer);
  }
  std::string name() const override { return "stalling " + inner_->name(); }

 private:
  struct Held {
    absl::Span<const uint8_t> payload;  // where the sender keeps it
    std::vector<uint8_t> bytes;         // what it was when sent
    transport::SendCallback done;
  };
  size_t HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t n = 0;
    for (const auto& [peer, held] : held_) n += held.size();
    return n;
  }

  std::unique_ptr<transport::Transport> inner_;
  absl::Mutex mu_;
  std::string stalled_address_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<transport::PeerId> stalled_peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<transport::PeerId, std::vector<Held>> held_ ABSL_GUARDED_BY(mu_);
};

// The rig's engine behind a StallingTransport, a server that is stopped (its
// transport exists, sends to it never complete), and step 7 of epoch 1 given
// up for epoch 2 with both its pushes held on the way to that server.
class StalledSendTest : public ::testing::Test {
 protected:
  void Start(absl::Duration engine_timeout) {
    ASSERT_NO_FATAL_FAILURE(rig_.SetUp(engine_timeout, [this](auto inner) {
      auto t = std::make_unique<StallingTransport>(std::move(inner));
      engine_transport_ = t.get();
      return std::unique_ptr<transport::Transport>(std::move(t));
    }));
    auto stopped = transport::CreateInprocTransport(&rig_.hub(), {.on_receive = [](auto) {}});
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    stopped_ = *std::move(stopped);
    engine_transport_->Stall(stopped_->address());

    StepPlan plan = rig_.Plan(1, 7, 1, grad_.data());
    for (ChunkRoute& c : plan.tensors[0].chunks) c.server = stopped_->address();
    absl::StatusOr<StepReport> first = absl::UnknownError("not run");
    std::thread run([&] { first = rig_.engine().Run(plan); });
    ASSERT_TRUE(engine_transport_->AwaitHeld(2));
    rig_.engine().AbortEpochsBefore(2, "the cluster moved to epoch 2");
    run.join();
    ASSERT_EQ(first.status().code(), absl::StatusCode::kAborted) << first.status();
  }

  HandServer rig_;
  StallingTransport* engine_transport_ = nullptr;  // owned by the engine
  std::unique_ptr<transport::Transport> stopped_;
  std::vector<float> grad_ = std::vector<float>(2 * HandServer::kCols, 0.5f);
};

TEST_F(StalledSendTest, TheRetryUnderAnEpochWithoutTheServerEncodesIntoAFreshArena) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(30)));
  // Epoch 2 routes both chunks to the rig's live server; steps 7 and 8 run
  // while the pushes to the stopped server are still held.
  for (const uint64_t step : {7, 8}) {
    std::fill(grad_.begin(), grad_.end(), 0.25f * step);
    absl::StatusOr<StepReport> report = absl::UnknownError("not run");
    std::thread run([&] { report = rig_.engine().Run(rig_.Plan(2, step, 1, grad_.data())); });
    const bool pushed = rig_.AwaitPushes(2 * (step - 6));
    if (pushed) {
      rig_.Send(dataplane::ChunkKind::kResult, 2, step, 1, 0, 3.0f * step);
      rig_.Send(dataplane::ChunkKind::kResult, 2, step, 1, 1, 4.0f * step);
    }
    run.join();
    ASSERT_TRUE(pushed) << "step " << step << " never pushed: " << report.status();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(grad_[0], 3.0f * step);
    EXPECT_EQ(grad_[HandServer::kCols], 4.0f * step);
  }
  EXPECT_EQ(rig_.engine().stalled_send_arenas_renewed(), 1u);
  // The stopped server resumes and takes the old pushes: their bytes were
  // left alone, and they end.
  EXPECT_EQ(engine_transport_->held(), 2u);
  EXPECT_TRUE(engine_transport_->Resume()) << "a held push was overwritten";
  EXPECT_EQ(rig_.engine().stalled_send_arenas_freed(), 0u);
  // Their arena is freed by the next step, once nothing reads it.
  absl::StatusOr<StepReport> report = absl::UnknownError("not run");
  std::thread run([&] { report = rig_.engine().Run(rig_.Plan(2, 9, 1, grad_.data())); });
  const bool pushed = rig_.AwaitPushes(6);
  if (pushed) {
    rig_.Send(dataplane::ChunkKind::kResult, 2, 9, 1, 0, 27.0f);
    rig_.Send(dataplane::ChunkKind::kResult, 2, 9, 1, 1, 36.0f);
  }
  run.join();
  ASSERT_TRUE(pushed) << "step 9 never pushed: " << report.status();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(grad_[0], 27.0f);
  EXPECT_EQ(rig_.engine().stalled_send_arenas_freed(), 1u);
}

TEST_F(StalledSendTest, ASendToAServerTheRetryStillUsesIsWaitedFor) {
  ASSERT_NO_FATAL_FAILURE(Start(absl::Seconds(1)));
  // Epoch 2 keeps the stopped server (it is late, not gone, as far as the
  // worker knows): its connection stays, and the retry fails when its
  // timeout ends.
  StepPlan plan = rig_.Plan(2, 7, 1, grad_.data());
  for (ChunkRoute& c : plan.tensors[0].chunks) c.server = stopped_->address();
  absl::StatusOr<StepReport> retry = rig_.engine().Run(plan);
  ASSERT_FALSE(retry.ok());
  EXPECT_EQ(retry.status().code(), absl::StatusCode::kUnavailable) << retry.status();
  EXPECT_NE(retry.status().message().find("pushes of an earlier step have not completed"),
            std::string::npos)
      << retry.status();
  EXPECT_EQ(rig_.engine().stalled_send_arenas_renewed(), 0u);
  EXPECT_EQ(engine_transport_->held(), 2u);
}

}  // namespace
}  // namespace gift::worker
