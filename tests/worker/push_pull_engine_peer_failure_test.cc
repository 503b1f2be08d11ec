// Aggregator failures and the push-pull engine (in-process transports): a
// failure report ends a step only when the step pushes to that aggregator;
// a failed step says who failed and whether it pushed; and a step that
// failed before pushing runs again under the same epoch and completes with
// every rank counted once (the regression of the fault suite's server-kill
// hang with data-plane MACs on: a late report about the dead server of an
// earlier epoch aborted the next epoch's step).
#include <memory>
#include <string>
#include <vector>

#include "common/codec/codec_spec.h"
#include "gift/v1/cluster.pb.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_rig.h"
#include "tests/worker/engine_test_util.h"
#include "worker/daemon/step_retry.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker {
namespace {

using testing::Gradient;
using testing::Tensor;

constexpr uint32_t kWorld = 2;
const Tensor kTensor = {7, 4, 256, 1, false};  // 4 chunks of one row
const Tensor kLater = {8, 2, 256, 1, false};   // added to a step later

codec::CodecSpec Fp32() { return codec::ParseCodecSpec("fp32").value(); }

class EnginePeerFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(rig_.Start({.servers = 2, .workers = kWorld}).ok());
    addresses_ = rig_.servers;
  }

  // Installs `epoch` on shard `s`, with the chunks of kTensor and kLater
  // that `routes` give it.
  void SetEpoch(int s, uint64_t epoch, const std::vector<ChunkRoute>& routes) {
    std::vector<ChunkRoute> later;
    for (const ChunkRoute& c : routes) {
      if (c.offset + c.num_elements <= kLater.rows * kLater.cols) later.push_back(c);
    }
    ASSERT_TRUE(rig_.SetEpoch(s, epoch, {{kTensor, routes}, {kLater, later}}).ok());
  }

  TensorStep Later(std::vector<float>& data, const std::vector<std::string>& servers) {
    return {.tensor_id = kLater.id,
            .rows = kLater.rows,
            .cols = kLater.cols,
            .data = data.data(),
            .chunks = testing::Routes(kLater, servers),
            .push_spec = Fp32()};
  }

  StepPlan Plan(uint64_t epoch, uint64_t step, uint32_t rank, std::vector<float>& data,
                const std::vector<ChunkRoute>& routes) {
    StepPlan plan{.epoch = epoch, .step = step, .rank = rank, .world_size = kWorld};
    plan.tensors.push_back({.tensor_id = kTensor.id,
                            .rows = kTensor.rows,
                            .cols = kTensor.cols,
                            .data = data.data(),
                            .chunks = routes,
                            .push_spec = Fp32()});
    return plan;
  }

  // Both ranks run `step` of `epoch`; both must get the exact average.
  void RunBoth(uint64_t epoch, uint64_t step, const std::vector<ChunkRoute>& routes) {
    std::vector<std::vector<float>> data = {Gradient(kTensor, 0, step), Gradient(kTensor, 1, step)};
    const auto reports =
        rig_.Run({Plan(epoch, step, 0, data[0], routes), Plan(epoch, step, 1, data[1], routes)});
    for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(reports[r].ok()) << reports[r].status();
    EXPECT_EQ(data[0], Average(step));
    EXPECT_EQ(data[1], data[0]);
  }

  // The exact average of both ranks' gradients at `step` (FP32 both ways:
  // which server sums a chunk does not change its bits).
  std::vector<float> Average(uint64_t step) {
    return testing::LocalAverage(kTensor, step, kWorld, addresses_, Fp32(), Fp32(), nullptr);
  }

  // Waits until `engine` has seen `n` aggregator failures (they arrive on
  // its progress thread).
  static void AwaitPeerFailures(const PushPullEngine& engine, uint64_t n) {
    for (int i = 0; i < 20000 && engine.inbox().peer_failures() < n; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(engine.inbox().peer_failures(), n);
  }

  testing::EngineRig rig_;
  std::vector<std::string> addresses_;  // the shards' (kept when a shard is gone)
};

TEST_F(EnginePeerFailureTest, AReportAboutAServerTheStepDoesNotUseLeavesItRunning) {
  // Epoch 1 uses both servers, so both engines hold connections to server 1.
  const auto both = testing::Routes(kTensor, addresses_);
  SetEpoch(0, 1, both);
  SetEpoch(1, 1, both);
  RunBoth(1, 0, both);
  // Epoch 2 dropped server 1; rank 0's step of it is open, no result can
  // have come (rank 1 has not pushed), when server 1 dies and rank 0's
  // connection to it is reported failed.
  const std::vector<std::string> live = {addresses_[0]};
  const auto only0 = testing::Routes(kTensor, live);
  SetEpoch(0, 2, only0);
  std::vector<float> data0 = Gradient(kTensor, 0, 1), data1 = Gradient(kTensor, 1, 1);
  std::vector<float> later0 = Gradient(kLater, 0, 1), later1 = Gradient(kLater, 1, 1);
  StepPlan plan0 = Plan(2, 1, 0, data0, only0);
  ASSERT_TRUE(rig_.engines[0]->Begin(StepHeader(plan0)).ok());
  ASSERT_TRUE(rig_.engines[0]->Add(plan0.tensors).ok());
  rig_.shards[1].reset();
  AwaitPeerFailures(*rig_.engines[0], 1);
  // The step goes on (an abort would fail this Add: results are missing)
  // and completes once rank 1 pushed.
  const TensorStep later = Later(later0, live);
  ASSERT_TRUE(rig_.engines[0]->Add({&later, 1}).ok());
  StepPlan plan1 = Plan(2, 1, 1, data1, only0);
  plan1.tensors.push_back(Later(later1, live));
  auto report1 = rig_.engines[1]->Run(plan1);
  auto report0 = rig_.engines[0]->Finish();
  ASSERT_TRUE(report0.ok()) << report0.status();
  ASSERT_TRUE(report1.ok()) << report1.status();
  EXPECT_EQ(rig_.engines[0]->inbox().peer_failures_that_aborted(), 0u);
  EXPECT_EQ(data0, Average(1));
  EXPECT_EQ(data1, data0);
  EXPECT_EQ(later0, testing::LocalAverage(kLater, 1, kWorld, live, Fp32(), Fp32(), nullptr));
  EXPECT_EQ(later1, later0);
}

TEST_F(EnginePeerFailureTest, AFailedServerOfTheStepEndsItAndIsNamed) {
  const auto both = testing::Routes(kTensor, addresses_);
  SetEpoch(0, 1, both);
  SetEpoch(1, 1, both);
  std::vector<float> data0 = Gradient(kTensor, 0, 0);
  const std::vector<float> before = data0;
  StepPlan plan0 = Plan(1, 0, 0, data0, both);
  ASSERT_TRUE(rig_.engines[0]->Begin(StepHeader(plan0)).ok());
  ASSERT_TRUE(rig_.engines[0]->Add(plan0.tensors).ok());  // rank 1 never pushes
  const std::string dead = addresses_[1];
  rig_.shards[1].reset();
  auto report = rig_.engines[0]->Finish();
  ASSERT_EQ(report.status().code(), absl::StatusCode::kUnavailable) << report.status();
  EXPECT_EQ(rig_.engines[0]->inbox().peer_failures_that_aborted(), 1u);
  const StepFailureInfo info = DescribeStepFailure(report.status());
  EXPECT_EQ(info.aggregator, dead);
  EXPECT_TRUE(info.pushed);
  EXPECT_EQ(data0, before);  // untouched
  // Pushes left: whatever the state, the retry waits for a new epoch.
  EXPECT_FALSE(RetryUnderSameEpoch(report.status(), gift::v1::ClusterState()));
}

TEST_F(EnginePeerFailureTest, AStepThatFailedBeforePushingRunsAgainUnderTheSameEpoch) {
  // Rank 0 plans with a stale route to a server that is gone (its address
  // is not in the current state); the engine fails before any push.
  const std::string dead = addresses_[1];
  rig_.shards[1].reset();
  const auto only0 = testing::Routes(kTensor, {addresses_[0]});
  SetEpoch(0, 1, only0);
  auto stale = only0;
  stale.back().server = dead;
  std::vector<float> data0 = Gradient(kTensor, 0, 0);
  auto failed = rig_.engines[0]->Run(Plan(1, 0, 0, data0, stale));
  ASSERT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  const StepFailureInfo info = DescribeStepFailure(failed.status());
  EXPECT_EQ(info.aggregator, dead);
  EXPECT_FALSE(info.pushed);
  gift::v1::ClusterState state;
  state.set_epoch(1);
  state.add_servers()->set_data_address(addresses_[0]);
  EXPECT_TRUE(RetryUnderSameEpoch(failed.status(), state));
  // The same epoch and step again, with the state's routes: both ranks get
  // the exact average (rank 0 counted once).
  RunBoth(1, 0, only0);
  // A failure naming a server of the current epoch waits for its eviction.
  state.add_servers()->set_data_address(dead);
  EXPECT_FALSE(RetryUnderSameEpoch(failed.status(), state));
  // An abort (the epoch ended) always waits for the new epoch.
  absl::Status aborted = absl::AbortedError("epoch 2 replaced the step's epoch");
  EXPECT_FALSE(RetryUnderSameEpoch(aborted, gift::v1::ClusterState()));
}

}  // namespace
}  // namespace gift::worker
