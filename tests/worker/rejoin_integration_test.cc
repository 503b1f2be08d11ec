// Rejoin and heal (issue 15 item 4), with real processes on loopback
// (tools/gift-cluster LocalCluster: gift-coordinator, one gift-server, three
// gift-worker daemons). The red-team case: a worker SIGSTOPped in the middle
// of a step, past its lease, then resumed while the others are many steps
// ahead. It must not take the others' steps down: the survivors keep
// stepping with exact averages, the returning worker's PushPull answers
// FAILED_PRECONDITION naming its admit step and why it lost its lease, and
// from the admit step on all three step together, exactly.
//
// Exactness: FP32 codecs, direct; worker w's gradient is 4^w everywhere, so
// average * world_size names in base 4 who was counted, each once.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

using ::testing::HasSubstr;

constexpr int kWorkers = 3;
constexpr int64_t kRows = 64, kCols = 64;

class RejoinIntegrationTest : public test::ClusterFixture<> {
 protected:
  tools::LocalClusterOptions Options() override { return test::ShortLeaseOptions(1, kWorkers); }

  // FP32 both ways, no basis: every result is exact.
  void SetUp() override {
    test::ClusterFixture<>::SetUp();
    if (HasFatalFailure()) return;
    const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
    gift::v1::Policy policy;
    *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(fp32);
    *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(fp32);
    policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
    policy.mutable_selection()->add_exclude("*");
    SetPolicy(policy);
    Register({{"rejoin.grad", {kRows, kCols}}});
  }

  void TearDown() override {
    if (stopped_) (void)cluster_->worker(kWorkers - 1)->Signal(SIGCONT);
    test::ClusterFixture<>::TearDown();
  }

  // Starts PushPull(step) on worker w with its gradient 4^w.
  std::future<absl::StatusOr<client::PushPullResult>> Start(int w, uint64_t step) {
    std::fill_n(tensors_[w][0].data(), tensors_[w][0].size(), static_cast<float>(1u << (2 * w)));
    return std::async(std::launch::async, [this, w, step] { return clients_[w]->PushPull(step); });
  }

  // The step's result on worker w is the exact average over `counted`.
  void ExpectExact(int w, const absl::StatusOr<client::PushPullResult>& r,
                   const std::vector<int>& counted, uint64_t step) {
    ASSERT_TRUE(r.ok()) << "worker " << w << " step " << step << ": " << r.status();
    ASSERT_EQ(r->world_size, counted.size()) << "worker " << w << " step " << step;
    float sum = 0;
    for (int c : counted) sum += static_cast<float>(1u << (2 * c));
    const float want = sum / static_cast<float>(counted.size());
    for (size_t i = 0; i < tensors_[w][0].size(); ++i) {
      ASSERT_EQ(tensors_[w][0].data()[i], want)
          << "worker " << w << " step " << step << " elem " << i;
    }
  }

  // One step on `workers`, each result exact over them; its wall seconds.
  double StepExact(const std::vector<int>& workers, uint64_t step) {
    const absl::Time t0 = absl::Now();
    std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
    for (int w : workers) calls.push_back(Start(w, step));
    for (size_t i = 0; i < workers.size(); ++i) {
      ExpectExact(workers[i], calls[i].get(), workers, step);
    }
    return absl::ToDoubleSeconds(absl::Now() - t0);
  }

  bool stopped_ = false;
};

TEST_F(RejoinIntegrationTest, AStoppedWorkerPastItsLeaseIsAdmittedAheadAndNeverBlocksTheOthers) {
  const int late = kWorkers - 1;
  for (uint64_t step = 0; step < 5; ++step) StepExact({0, 1, 2}, step);

  // Worker 2 stops between steps (SIGSTOP: its connections stay open until
  // the coordinator's keepalive closes them, or its lease of 2 s runs out)
  // while 0 and 1 wait in step 5: they complete it in the next epoch
  // without it, then run 20 steps ahead.
  ASSERT_TRUE(cluster_->worker(late)->Signal(SIGSTOP).ok());
  stopped_ = true;
  constexpr uint64_t kAhead = 25;
  for (uint64_t step = 5; step < kAhead; ++step) StepExact({0, 1}, step);

  // 2 resumes and its training loop goes on at its old step, 5. Its session
  // finds the lease gone and joins again; the step answers with the admit
  // step instead of pushing into the others' world.
  ASSERT_TRUE(cluster_->worker(late)->Signal(SIGCONT).ok());
  stopped_ = false;
  const absl::Time resumed = absl::Now();
  const absl::StatusOr<client::PushPullResult> refused = Start(late, 5).get();
  const double refusal_s = absl::ToDoubleSeconds(absl::Now() - resumed);
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  const std::string message(refused.status().message());
  // The steps the coordinator had heard of (heartbeats every TTL/4).
  std::smatch evicted;
  ASSERT_TRUE(std::regex_search(
      message, evicted,
      std::regex("evicted at step ([0-9]+) \\((its lease expired|its connection to the "
                 "coordinator died while a step waited for it)\\), cluster at step ([0-9]+)")))
      << message;
  EXPECT_LE(std::stoull(evicted[1]), 4u);
  EXPECT_LT(std::stoull(evicted[3]), kAhead);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(message, m, std::regex("admitted at step ([0-9]+)"))) << message;
  const uint64_t admit = std::stoull(m[1]);
  EXPECT_GE(admit, kAhead);
  // Any step below the admit step gets the same answer, at once.
  auto again = clients_[late]->PushPull(admit - 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr(absl::StrCat("admitted at step ", admit)));

  // The others go on up to the admit step without it ...
  for (uint64_t step = kAhead; step < admit; ++step) StepExact({0, 1}, step);
  // ... and from there all three step together, each counted once.
  std::vector<double> seconds;
  for (uint64_t step = admit; step < admit + 6; ++step) {
    seconds.push_back(StepExact({0, 1, 2}, step));
  }
  // Reported, not asserted: the refusal's latency after SIGCONT and the
  // admit step (which waits for the admission's epoch) against the median
  // of the 5 steps after it.
  std::vector<double> after(seconds.begin() + 1, seconds.end());
  std::sort(after.begin(), after.end());
  std::printf("rejoin: refused %.3f s after SIGCONT; admit step %llu took %.3f s, later steps "
              "median %.3f s (ratio %.1f)\n",
              refusal_s, static_cast<unsigned long long>(admit), seconds[0], after[2],
              seconds[0] / after[2]);
}

// A stopped worker and a late one at the default lease (10 s). The stopped
// one is evicted as soon as its connection to the coordinator dies
// (gift-coordinator --keepalive: 0.5 s pings, 0.5 s to answer) while the
// others wait for it, not at its lease's end; a late worker whose daemon
// lives answers the pings and is waited for, however long.
// The same cluster with a lease of kLeaseSeconds.
template <int kLeaseSeconds>
class RejoinWithLeaseTest : public RejoinIntegrationTest {
 protected:
  tools::LocalClusterOptions Options() override {
    tools::LocalClusterOptions options = test::ShortLeaseOptions(1, kWorkers);
    options.lease_ttl = absl::Seconds(kLeaseSeconds);
    return options;
  }
};

class StalledPeerTest : public RejoinWithLeaseTest<10> {};

TEST_F(StalledPeerTest, AStoppedWorkerIsEvictedWhenItsConnectionDiesNotWhenItsLeaseEnds) {
  const int stopped = kWorkers - 1;
  for (uint64_t step = 0; step < 3; ++step) StepExact({0, 1, 2}, step);
  ASSERT_TRUE(cluster_->worker(stopped)->Signal(SIGSTOP).ok());
  stopped_ = true;
  const double stall_s = StepExact({0, 1}, 3);
  ASSERT_TRUE(cluster_->worker(stopped)->Signal(SIGCONT).ok());
  stopped_ = false;
  const absl::StatusOr<client::PushPullResult> refused = Start(stopped, 3).get();
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("its connection to the coordinator died while a step waited for it"));
  // Reported, not asserted: the step's wall time with the stop in it.
  std::printf("stalled peer: the step with a stopped worker took %.3f s (lease 10 s)\n", stall_s);
}

TEST_F(StalledPeerTest, ALateWorkerWhoseDaemonLivesIsWaitedForNotEvicted) {
  StepExact({0, 1, 2}, 0);
  auto first = Start(0, 1);
  auto second = Start(1, 1);
  // Three times the keepalive's interval plus timeout: a stopped worker would
  // have been evicted by now.
  absl::SleepFor(absl::Seconds(3));
  auto late = Start(2, 1);
  ExpectExact(0, first.get(), {0, 1, 2}, 1);
  ExpectExact(1, second.get(), {0, 1, 2}, 1);
  ExpectExact(2, late.get(), {0, 1, 2}, 1);
  StepExact({0, 1, 2}, 2);
}

// A worker killed and replaced 5 steps into a run, long before the regular
// beats (a quarter of the 60 s lease) would have told the coordinator of any
// completed step: each member beats at once when its first step completes,
// so the replacement is admitted at a step instead of entering the world
// as at a start (the soak's stall of December 2026, operations.md).
class EarlyReplacementTest : public RejoinWithLeaseTest<60> {
 protected:
  // Worker w's daemon restarted (a new member) and its client connected
  // again with the same tensor.
  void Replace(int w) {
    ASSERT_TRUE(cluster_->RestartWorker(w).ok());
    tensors_[w].clear();
    clients_[w].reset();
    auto c = client::WorkerClient::Connect(cluster_->worker_socket(w));
    ASSERT_TRUE(c.ok()) << c.status();
    clients_[w] = *std::move(c);
    auto tensors = clients_[w]->Register({{"rejoin.grad", {kRows, kCols}}});
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    tensors_[w] = *std::move(tensors);
  }
};

TEST_F(EarlyReplacementTest, AWorkerReplacedBeforeTheRegularBeatsIsAdmittedAtAStep) {
  const int victim = kWorkers - 1;
  for (uint64_t step = 0; step < 5; ++step) StepExact({0, 1, 2}, step);
  ASSERT_TRUE(cluster_->KillWorker(victim).ok());
  at_tear_down_ = AtTearDown::kStopAnyhow;
  // The others complete step 5 without it once its eviction is confirmed.
  StepExact({0, 1}, 5);
  Replace(victim);
  if (HasFatalFailure()) return;
  // Its training loop goes on at the cluster's step, 6: refused with a step
  // the others may not have begun, while they complete step 6 without it.
  uint64_t step = 6;
  auto w0 = Start(0, step), w1 = Start(1, step);
  const absl::StatusOr<client::PushPullResult> first = Start(victim, step).get();
  ASSERT_TRUE(absl::IsFailedPrecondition(first.status())) << first.status();
  std::smatch m;
  const std::string message(first.status().message());
  ASSERT_TRUE(std::regex_search(message, m, std::regex("admitted at step ([0-9]+)"))) << message;
  const uint64_t admit = std::stoull(m[1]);
  EXPECT_GT(admit, step);
  ExpectExact(0, w0.get(), {0, 1}, step);
  ExpectExact(1, w1.get(), {0, 1}, step);
  ++step;
  for (; step < admit; ++step) StepExact({0, 1}, step);
  for (; step < admit + 3; ++step) StepExact({0, 1, 2}, step);
}

}  // namespace
}  // namespace gift::worker
