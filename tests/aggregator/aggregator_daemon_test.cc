// AggregatorDaemon in-process: a real gift-coordinator (child process), one
// aggregator shard over UCX with its member session and daemon in this
// process, and in-process workers (member sessions + push-pull engines).
// The daemon follows the cluster state into the shard (epochs, chunks, a
// worker joining), steps average through it, and Drain completes.
#include "server/aggregator/aggregator_daemon.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::server {
namespace {

using TestWorker = test::UcxWorker;

TestWorker StartWorker(const std::string& coordinator, int index) {
  auto w = test::StartUcxWorker(coordinator, absl::StrCat("worker-", index));
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *std::move(w) : TestWorker{};
}

// Runs one step of every worker over the state's shard map; returns the
// largest relative error of the averaged tensors (all workers must agree).
double RunStep(std::vector<TestWorker>& workers, const gift::v1::ClusterState& cs, uint64_t step) {
  const size_t n = workers.size();
  std::vector<std::vector<std::vector<float>>> buffers(n);
  std::vector<worker::StepPlan> plans(n);
  for (size_t w = 0; w < n; ++w) {
    plans[w] = test::PlanFromState(cs, step, workers[w].session->rank(), static_cast<uint32_t>(n),
                                   codec::ParseCodecSpec("e4m3/block32").value(), &buffers[w]);
  }
  std::vector<std::vector<double>> exact(cs.tensors_size());
  for (int i = 0; i < cs.tensors_size(); ++i) {
    exact[i].assign(buffers[0][i].size(), 0.0);
    for (size_t w = 0; w < n; ++w) {
      for (size_t k = 0; k < exact[i].size(); ++k) exact[i][k] += buffers[w][i][k] / n;
    }
  }
  std::vector<absl::StatusOr<worker::StepReport>> reports(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < n; ++w) {
    threads.emplace_back([&, w] { reports[w] = workers[w].engine->Run(plans[w]); });
  }
  for (auto& t : threads) t.join();
  for (size_t w = 0; w < n; ++w) {
    EXPECT_TRUE(reports[w].ok()) << "worker " << w << ": " << reports[w].status();
    if (!reports[w].ok()) return INFINITY;
    EXPECT_EQ(buffers[w], buffers[0]) << "worker " << w;
  }
  double worst = 0;
  for (int i = 0; i < cs.tensors_size(); ++i) {
    double err = 0, norm = 0;
    for (size_t k = 0; k < exact[i].size(); ++k) {
      err += (buffers[0][i][k] - exact[i][k]) * (buffers[0][i][k] - exact[i][k]);
      norm += exact[i][k] * exact[i][k];
    }
    worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

TEST(AggregatorDaemonTest, FollowsEpochsIntoTheShardServesStepsAndDrains) {
  const gift::TempDir dir = test::NewTempDir("gift-aggregator-daemon");
  auto coordinator = tools::CoordinatorProcess::Start(
      {.binary = GIFT_COORDINATOR_BIN, .state_file = dir.File("state.db")});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();

  auto shard = AggregatorShard::Create(
      {.reducer = {.pull_spec = codec::ParseCodecSpec("bf16").value()}, .reduce_threads = 2},
      [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); });
  ASSERT_TRUE(shard.ok()) << shard.status();
  control::MemberSessionOptions server_options;
  server_options.name = "shard-0";
  server_options.role = gift::v1::MEMBER_ROLE_SERVER;
  server_options.data_address = (*shard)->address();
  auto server_session = control::MemberSession::Start(
      control::CoordinatorClient::MakeChannel(address), server_options);
  ASSERT_TRUE(server_session.ok()) << server_session.status();
  auto daemon = std::make_unique<AggregatorDaemon>(shard->get(), server_session->get());
  EXPECT_EQ(daemon->shard_id(), 0u);

  std::vector<TestWorker> workers;
  for (int w = 0; w < 2; ++w) {
    workers.push_back(StartWorker(address, w));
    ASSERT_NE(workers.back().session, nullptr);
  }
  ASSERT_TRUE(workers[0].session->RegisterTensors(test::Float32Specs({{64, 96}, {1000}})).ok());
  auto ready = [&](size_t world) {
    return workers[0].session->WaitFor(test::ClusterReady(int(world), 1, 2), absl::Seconds(30));
  };
  auto state = ready(2);
  ASSERT_TRUE(state.ok()) << state.status();
  // The daemon applies the epoch and its chunks to the shard.
  auto applied = [&](const gift::v1::ClusterState& cs, size_t world) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if ((*shard)->epoch() == cs.epoch() && daemon->workers() == world &&
          daemon->chunks() == uint64_t(cs.shard_map().chunks_size())) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(applied(**state, 2))
      << "shard epoch " << (*shard)->epoch() << ", state epoch " << (*state)->epoch();
  EXPECT_LT(absl::Now() - daemon->last_tick(), absl::Seconds(2));
  for (uint64_t step = 0; step < 3; ++step) {
    EXPECT_LT(RunStep(workers, **state, step), 0.05) << "step " << step;
  }

  // A worker joins: a new epoch, which the daemon installs; steps go on.
  workers.push_back(StartWorker(address, 2));
  ASSERT_NE(workers.back().session, nullptr);
  auto grown = ready(3);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_GT((*grown)->epoch(), (*state)->epoch());
  ASSERT_TRUE(applied(**grown, 3));
  // Every worker must know its rank in the new epoch before it plans.
  for (auto& w : workers) {
    auto seen = w.session->WaitFor(
        [&](const gift::v1::ClusterState& s) { return s.epoch() >= (*grown)->epoch(); },
        absl::Seconds(20));
    ASSERT_TRUE(seen.ok()) << seen.status();
  }
  EXPECT_LT(RunStep(workers, **grown, 10), 0.05);
  const AggregatorShard::Counters c = (*shard)->counters();
  EXPECT_EQ(c.chunks_completed, 4 * uint64_t((*state)->shard_map().chunks_size()));

  // Drain: nothing in flight, so it completes at once.
  EXPECT_TRUE(daemon->Drain({.timeout = absl::Seconds(10)}));
  EXPECT_EQ((*shard)->pending_chunks(), 0u);
  daemon->Stop();
  daemon->Stop();  // idempotent
  daemon.reset();
  for (auto& w : workers) EXPECT_TRUE(w.session->Close().ok());
  EXPECT_TRUE((*server_session)->Close().ok());
  EXPECT_TRUE((*coordinator)->Stop().ok());
}

}  // namespace
}  // namespace gift::server
