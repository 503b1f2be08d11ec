// AggregatorDaemon in-process: a real gift-coordinator (child process), one
// aggregator shard over UCX with its member session and daemon in this
// process, and in-process workers (member sessions + push-pull engines).
// The daemon follows the cluster state into the shard (epochs, chunks, a
// worker joining), steps average through it, and Drain completes.
#include "server/aggregator/aggregator_daemon.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/control/coordinator_process.h"
#include "common/control/member_session.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "worker/push_pull_engine.h"

namespace gift::server {
namespace {

std::string TempDir() {
  std::string dir = absl::StrCat(::testing::TempDir(), "/gift-aggregator-daemon-XXXXXX");
  return mkdtemp(dir.data()) == nullptr ? ::testing::TempDir() : dir;
}

struct TestWorker {
  std::unique_ptr<worker::PushPullEngine> engine;
  std::unique_ptr<control::MemberSession> session;
};

TestWorker StartWorker(const std::string& coordinator, int index) {
  TestWorker w;
  auto engine = worker::PushPullEngine::Create(
      [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); },
      {.timeout = absl::Seconds(30)});
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return w;
  control::MemberSessionOptions options;
  options.name = absl::StrCat("worker-", index);
  options.data_address = (*engine)->address();
  auto session =
      control::MemberSession::Start(control::CoordinatorClient::MakeChannel(coordinator), options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return w;
  w.engine = *std::move(engine);
  w.session = *std::move(session);
  return w;
}

// Runs one step of every worker over the state's shard map; returns the
// largest relative error of the averaged tensors (all workers must agree).
double RunStep(std::vector<TestWorker>& workers, const gift::v1::ClusterState& cs, uint64_t step) {
  const size_t n = workers.size();
  std::vector<std::vector<std::vector<float>>> buffers(n);
  std::vector<worker::StepPlan> plans(n);
  std::vector<std::string> servers(cs.servers_size());
  for (const auto& m : cs.servers()) servers[m.rank()] = m.data_address();
  for (size_t w = 0; w < n; ++w) {
    plans[w] = {.epoch = cs.epoch(),
                .step = step,
                .rank = workers[w].session->rank(),
                .world_size = static_cast<uint32_t>(n)};
    for (const auto& t : cs.tensors()) {
      std::mt19937 rng(uint32_t(step * 100 + t.tensor_id() * 10 + plans[w].rank));
      std::normal_distribution<float> normal;
      std::vector<float> g(t.num_elements());
      for (float& x : g) x = normal(rng);
      buffers[w].push_back(std::move(g));
      const uint64_t cols = t.shape(t.shape_size() - 1);
      worker::TensorStep ts{.tensor_id = t.tensor_id(),
                            .rows = t.num_elements() / cols,
                            .cols = cols,
                            .data = buffers[w].back().data(),
                            .push_spec = codec::ParseCodecSpec("e4m3/block32").value()};
      for (const auto& c : cs.shard_map().chunks()) {
        if (c.tensor_id() != t.tensor_id()) continue;
        ts.chunks.push_back({.index = c.index(),
                             .offset = c.offset(),
                             .num_elements = c.num_elements(),
                             .server = servers[c.server_rank()]});
      }
      plans[w].tensors.push_back(std::move(ts));
    }
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
  const std::string dir = TempDir();
  auto coordinator = control::CoordinatorProcess::Start(
      {.binary = GIFT_COORDINATOR_BIN, .state_file = dir + "/state.db"});
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
  std::vector<gift::v1::TensorSpec> specs(2);
  const std::vector<std::vector<int64_t>> shapes = {{64, 96}, {1000}};
  for (int i = 0; i < 2; ++i) {
    specs[i].set_name(absl::StrCat("layer", i, ".weight"));
    for (int64_t d : shapes[i]) specs[i].add_shape(d);
    specs[i].set_dtype(gift::v1::DTYPE_FLOAT32);
  }
  ASSERT_TRUE(workers[0].session->RegisterTensors(specs).ok());
  auto ready = [&](size_t world) {
    return workers[0].session->WaitFor(
        [&](const gift::v1::ClusterState& s) {
          return s.workers_size() == int(world) && s.servers_size() == 1 && s.tensors_size() == 2 &&
                 s.shard_map().chunks_size() > 0 && s.shard_map().epoch() == s.epoch();
        },
        absl::Seconds(30));
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
  EXPECT_TRUE(daemon->Drain(absl::Seconds(10)));
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
