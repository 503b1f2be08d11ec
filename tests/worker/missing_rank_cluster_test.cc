// A job its users can see (issue 33 items 1-2), with real processes on
// loopback (gift-coordinator, one gift-server, two gift-worker daemons):
//   - a rank that never calls PushPull for a step is named in the waiting
//     worker's log within 5 s, in `giftctl status`, in the coordinator's
//     waiting-ranks metric, and in the step's final DEADLINE_EXCEEDED;
//   - a peer whose registration the coordinator refuses fails the other's
//     pending step within 2 s, naming it;
//   - kill -9 of a worker: under on_member_loss fail the survivor's steps
//     fail naming it until it registers again; under continue its next
//     result carries the previous world size and the lost worker.
#include <signal.h>

#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/daemon/http_get.h"
#include "tests/testing/cluster_fixture.h"
#include "tools/gift-cluster/local_cluster.h"
#include "tools/gift-cluster/subprocess.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 2;

class MissingRankClusterTest : public test::ClusterFixture<> {
 protected:
  // Each test starts its own cluster (Start), and stops it cleanly: a
  // server's SIGTERM drain does not wait for the partial chunks of the steps
  // these tests leave abandoned (--drain-quiet).
  MissingRankClusterTest() { starts_in_set_up_ = false; }

  void Start(gift::v1::OnMemberLoss on_loss, absl::Duration step_timeout) {
    tools::LocalClusterOptions options = test::ShortLeaseOptions(1, kWorkers);
    options.step_timeout = step_timeout;
    options.metrics = true;
    StartCluster(options);
    if (HasFatalFailure()) return;
    gift::v1::Policy policy;
    policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
    policy.mutable_selection()->add_exclude("*");  // direct: the test is about membership
    policy.set_on_member_loss(on_loss);
    SetPolicy(policy);
    for (int w = 0; w < kWorkers; ++w) {
      auto c = client::WorkerClient::Connect(cluster_->worker_socket(w));
      ASSERT_TRUE(c.ok()) << c.status();
      clients_.push_back(*std::move(c));
    }
  }

  void RegisterAll() {
    for (int w = 0; w < kWorkers; ++w) {
      auto t = clients_[w]->Register({{"layer.w", {32, 16}}});
      ASSERT_TRUE(t.ok()) << t.status();
    }
  }

  std::future<absl::StatusOr<client::PushPullResult>> Step(int w, uint64_t step) {
    return std::async(std::launch::async, [this, w, step] { return clients_[w]->PushPull(step); });
  }

  void StepAll(uint64_t step) {
    std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
    for (int w = 0; w < kWorkers; ++w) calls.push_back(Step(w, step));
    for (auto& c : calls) {
      auto r = c.get();
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << Logs();
      EXPECT_EQ(r->previous_world_size, 0u);
    }
  }

  std::string Metrics() {
    for (const auto& [name, address] : cluster_->metrics_addresses()) {
      if (name == "coordinator") return daemon::testing::HttpGet(address, "/metrics");
    }
    return "";
  }

  std::string GiftctlStatus() {
    auto p = tools::Subprocess::Start(
        {GIFTCTL_BIN, "--coordinator", cluster_->coordinator_address(), "status"});
    if (!p.ok()) return p.status().ToString();
    (void)(*p)->WaitForExit(absl::Seconds(30));
    return (*p)->stdout_text();
  }
};

TEST_F(MissingRankClusterTest, ARankThatNeverPushesIsNamedInLogStatusMetricAndError) {
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_CONTINUE, absl::Seconds(8)));
  ASSERT_NO_FATAL_FAILURE(RegisterAll());
  ASSERT_NO_FATAL_FAILURE(StepAll(1));
  const std::string missing = cluster_->worker_name(1);
  const absl::Time began = absl::Now();
  auto waiting = Step(0, 2);  // worker 1 never calls step 2

  // The waiting worker's log names rank 1 within 5 s.
  bool logged = false;
  while (!logged && absl::Now() - began < absl::Seconds(8)) {
    absl::SleepFor(absl::Milliseconds(100));
    const std::string logs = Logs();
    logged = absl::StrContains(logs, "\"event\":\"step_waiting\"") &&
             absl::StrContains(logs, absl::StrCat("(", missing, ", ")) &&
             absl::StrContains(logs, "that has not begun step 2");
  }
  const absl::Duration to_log = absl::Now() - began;
  ASSERT_TRUE(logged) << Logs();
  EXPECT_LE(to_log, absl::Seconds(5));
  std::printf("missing rank named in the worker's log after %.2f s\n",
              absl::ToDoubleSeconds(to_log));

  // giftctl status and the metric, while the step still waits.
  const std::string status = GiftctlStatus();
  EXPECT_TRUE(absl::StrContains(status, absl::StrCat("step 2 for "))) << status;
  EXPECT_TRUE(absl::StrContains(status, absl::StrCat("(", missing, ", "))) << status;
  const std::string metrics = Metrics();
  EXPECT_TRUE(absl::StrContains(metrics, "gift_coordinator_oldest_incomplete_step_waiting_ranks 1"))
      << metrics;

  // The final error names it too.
  auto r = waiting.get();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("waiting for rank ")))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("(", missing, ", ")))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "has not begun step 2")) << r.status();

  // SIGTERM to the server alone: its drain does not wait for the abandoned
  // step's chunks (its --drain-timeout is 30 s; no push came for longer
  // than --drain-quiet), and its log names the rank they missed.
  tools::Subprocess* server = cluster_->server(0);
  const absl::Time stopping = absl::Now();
  ASSERT_TRUE(server->Signal(SIGTERM).ok());
  auto code = server->WaitForExit(absl::Seconds(40));
  const absl::Duration to_stop = absl::Now() - stopping;
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << Logs();
  EXPECT_EQ(*code, 0);
  EXPECT_LT(to_stop, absl::Seconds(10)) << Logs();
  std::printf("the server drained and exited in %.2f s\n", absl::ToDoubleSeconds(to_stop));
  const std::string log = server->stderr_text();
  EXPECT_TRUE(absl::StrContains(log, "\"event\":\"drained\",\"complete\":true")) << log;
  // The rank the worker's error named (ranks follow the order of joining).
  const std::string message(r.status().message());
  const size_t at = message.find("waiting for rank ") + std::string("waiting for rank ").size();
  const std::string rank = message.substr(at, message.find(' ', at) - at);
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("step 2 (1 chunk): rank ", rank, " missing")))
      << "rank " << rank << "\n"
      << log;
}

TEST_F(MissingRankClusterTest, AWorkerInItsStartBarrierSaysSoAndHasNotBegunTheStep) {
  // Worker 1 dies before the first step and its lease (3 s) ends: worker 0's
  // first step waits in its start barrier (--min-workers 2) for a world of
  // two. It logs that, and it does not report the step as begun: its wait
  // is not "every rank began step 1 (the servers' results are missing)".
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_CONTINUE, absl::Seconds(6)));
  ASSERT_NO_FATAL_FAILURE(RegisterAll());
  ASSERT_TRUE(cluster_->KillWorker(1).ok());
  const absl::Time killed = absl::Now();
  bool alone = false;
  while (!alone && absl::Now() - killed < absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(100));
    auto status = coordinator_->GetStatus();
    alone = status.ok() && status->state().workers_size() == 1;
  }
  ASSERT_TRUE(alone) << Logs();
  auto r = Step(0, 1).get();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "the first step waits for 2 workers"))
      << r.status();
  const std::string logs = Logs();
  EXPECT_TRUE(absl::StrContains(logs, "\"event\":\"start_barrier_waiting\"")) << logs;
  EXPECT_FALSE(absl::StrContains(logs, "\"event\":\"step_waiting\"")) << logs;
  EXPECT_FALSE(absl::StrContains(r.status().message(), "every rank began")) << r.status();
}

TEST_F(MissingRankClusterTest, APeerRefusedAtRegistrationFailsTheOthersStepAtOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_CONTINUE, absl::Seconds(60)));
  auto t0 = clients_[0]->Register({{"layer.w", {32, 16}}});
  ASSERT_TRUE(t0.ok()) << t0.status();
  auto waiting = Step(0, 1);
  absl::SleepFor(absl::Milliseconds(500));                        // worker 0 is in the step
  auto refused = clients_[1]->Register({{"layer.w", {16, 32}}});  // a mismatched shape
  const absl::Time at = absl::Now();
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists) << refused.status();
  auto r = waiting.get();
  const absl::Duration after = absl::Now() - at;
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(
      absl::StrContains(r.status().message(), absl::StrCat("(", cluster_->worker_name(1), ", ")))
      << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "refused its registration")) << r.status();
  EXPECT_LE(after, absl::Seconds(2));
  std::printf("the other's step failed %.2f s after the refusal\n", absl::ToDoubleSeconds(after));
  // Fixed, the job runs.
  auto fixed = clients_[1]->Register({{"layer.w", {32, 16}}});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_NO_FATAL_FAILURE(StepAll(2));
}

TEST_F(MissingRankClusterTest, KillUnderFailNamesTheLostWorkerUntilARunRegistersAgain) {
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_FAIL, absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(RegisterAll());
  ASSERT_NO_FATAL_FAILURE(StepAll(1));
  ASSERT_TRUE(cluster_->KillWorker(1).ok());
  for (uint64_t step : {2u, 3u}) {
    auto r = Step(0, step).get();
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "on_member_loss=fail")) << r.status();
    EXPECT_TRUE(
        absl::StrContains(r.status().message(), absl::StrCat("(", cluster_->worker_name(1), ", ")))
        << r.status();
  }
  // A new run (the training process registers again) goes on alone.
  auto again = clients_[0]->Register({{"layer.w", {32, 16}}});
  ASSERT_TRUE(again.ok()) << again.status();
  auto r = Step(0, 4).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->world_size, 1u);
}

TEST_F(MissingRankClusterTest, KillUnderContinueTellsTheSurvivorInItsNextResult) {
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_CONTINUE, absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(RegisterAll());
  ASSERT_NO_FATAL_FAILURE(StepAll(1));
  ASSERT_TRUE(cluster_->KillWorker(1).ok());
  auto r = Step(0, 2).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->world_size, 1u);
  EXPECT_EQ(r->previous_world_size, 2u);
  ASSERT_EQ(r->lost_members.size(), 1u);
  EXPECT_EQ(r->lost_members[0].name, cluster_->worker_name(1));
  r = Step(0, 3).get();  // said once
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->previous_world_size, 0u);
}

// Runs (issue 33 item 3): a job started again from step 0 under a new run
// id registers new shapes and steps from 0 on the same daemons; after a run
// reset, the old run's registration is told that a new run began.
TEST_F(MissingRankClusterTest, ANewRunStartsAtStepZeroInNewShapes) {
  ASSERT_NO_FATAL_FAILURE(Start(gift::v1::ON_MEMBER_LOSS_CONTINUE, absl::Seconds(30)));
  auto run = [&](const std::string& id, int64_t rows) {
    std::vector<std::unique_ptr<client::WorkerClient>> clients;
    for (int w = 0; w < kWorkers; ++w) {
      auto c = client::WorkerClient::Connect(cluster_->worker_socket(w), {.run_id = id});
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return clients;
      auto t = (*c)->Register({{"layer.w", {rows, 16}}});
      EXPECT_TRUE(t.ok()) << t.status();
      clients.push_back(*std::move(c));
    }
    for (uint64_t step = 0; step < 3; ++step) {
      std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
      for (auto& c : clients) {
        calls.push_back(std::async(std::launch::async, [&c, step] { return c->PushPull(step); }));
      }
      for (auto& f : calls) {
        auto r = f.get();
        EXPECT_TRUE(r.ok()) << "run " << id << " step " << step << ": " << r.status();
        if (r.ok()) {
          EXPECT_EQ(r->step, step);
        }
      }
    }
    return clients;
  };
  auto first = run("first", 32);
  ASSERT_EQ(first.size(), size_t{kWorkers});
  auto second = run("second", 8);  // the same steps, another shape
  ASSERT_EQ(second.size(), size_t{kWorkers});
  // An operator starts another run (giftctl run reset): the registrations of
  // run "second" are told so at their next step, not after a timeout.
  control::CoordinatorClient coordinator(
      control::CoordinatorClient::MakeChannel(cluster_->coordinator_address()), absl::Seconds(30));
  gift::v1::StartRunRequest reset;
  reset.set_run_id("third");
  ASSERT_TRUE(coordinator.StartRun(reset).ok());
  absl::SleepFor(absl::Milliseconds(500));  // the workers' Watch streams
  const absl::Time at = absl::Now();
  auto stale = second[0]->PushPull(3);
  ASSERT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_TRUE(absl::StrContains(stale.status().message(), "a new run began (run 'third'"))
      << stale.status();
  EXPECT_LT(absl::Now() - at, absl::Seconds(5));
}

}  // namespace
}  // namespace gift::worker
