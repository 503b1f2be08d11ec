// Real processes on loopback: gift-coordinator and two gift-server daemons;
// four workers in this process (member sessions + push-pull engines over
// UCX) drive steps through the servers.
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/control/coordinator_process.h"
#include "common/control/member_session.h"
#include "common/control/subprocess.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "worker/push_pull_engine.h"

namespace gift::server {
namespace {

constexpr int kWorkers = 4, kServers = 2;

std::string TempDir() {
  std::string dir = absl::StrCat(::testing::TempDir(), "/gift-server-daemon-XXXXXX");
  return mkdtemp(dir.data()) == nullptr ? ::testing::TempDir() : dir;
}

std::vector<float> Gradient(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  return g;
}

TEST(ServerDaemonTest, WorkersAverageThroughTwoServerProcesses) {
  const std::string dir = TempDir();
  auto coordinator = control::CoordinatorProcess::Start(
      {.binary = GIFT_COORDINATOR_BIN, .state_file = dir + "/state.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();

  std::vector<std::unique_ptr<control::Subprocess>> servers;
  for (int s = 0; s < kServers; ++s) {
    auto p = control::Subprocess::Start({GIFT_SERVER_BIN, "--coordinator", address, "--name",
                                         absl::StrCat("shard-", s), "--threads", "1"});
    ASSERT_TRUE(p.ok()) << p.status();
    servers.push_back(*std::move(p));
  }

  std::vector<std::unique_ptr<worker::PushPullEngine>> engines;
  std::vector<std::unique_ptr<control::MemberSession>> sessions;
  for (int w = 0; w < kWorkers; ++w) {
    auto engine = worker::PushPullEngine::Create(
        [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); },
        {.timeout = absl::Seconds(30)});
    ASSERT_TRUE(engine.ok()) << engine.status();
    control::MemberSessionOptions options;
    options.name = absl::StrCat("worker-", w);
    options.data_address = (*engine)->address();
    auto session =
        control::MemberSession::Start(control::CoordinatorClient::MakeChannel(address), options);
    ASSERT_TRUE(session.ok()) << session.status();
    engines.push_back(*std::move(engine));
    sessions.push_back(*std::move(session));
  }
  std::vector<gift::v1::TensorSpec> specs(3);
  const std::vector<std::vector<int64_t>> shapes = {{64, 96}, {33, 50}, {1000}};
  for (int i = 0; i < 3; ++i) {
    specs[i].set_name(absl::StrCat("layer", i, ".weight"));
    for (int64_t d : shapes[i]) specs[i].add_shape(d);
    specs[i].set_dtype(gift::v1::DTYPE_FLOAT32);
  }
  ASSERT_TRUE(sessions[0]->RegisterTensors(specs).ok());
  auto state = sessions[0]->WaitFor(
      [](const gift::v1::ClusterState& s) {
        return s.workers_size() == kWorkers && s.servers_size() == kServers &&
               s.tensors_size() == 3 && s.shard_map().chunks_size() > 0 &&
               s.shard_map().epoch() == s.epoch();
      },
      absl::Seconds(30));
  ASSERT_TRUE(state.ok()) << state.status();
  const gift::v1::ClusterState& cs = **state;
  // Each server announces that it serves this epoch with all its chunks.
  for (int s = 0; s < kServers; ++s) {
    uint32_t shard = kServers;
    for (const auto& m : cs.servers()) {
      if (m.name() == absl::StrCat("shard-", s)) shard = m.rank();
    }
    ASSERT_LT(shard, uint32_t{kServers});
    int chunks = 0;
    for (const auto& c : cs.shard_map().chunks()) chunks += c.server_rank() == shard;
    const std::string want_epoch = absl::StrCat("\"epoch\":", cs.epoch(), ",");
    const std::string want_chunks = absl::StrCat("\"chunks\":", chunks, "}");
    auto line = servers[s]->WaitForLine(
        [&](const std::string& l) {
          return absl::StrContains(l, "\"event\":\"serving\"") &&
                 absl::StrContains(l, want_epoch) && absl::StrContains(l, want_chunks);
        },
        absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status() << servers[s]->stderr_text();
  }

  // Plans from the cluster state.
  std::vector<std::string> server_addresses(kServers);
  for (const auto& m : cs.servers()) server_addresses[m.rank()] = m.data_address();
  for (uint64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<std::vector<float>>> buffers(kWorkers);
    std::vector<worker::StepPlan> plans(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      plans[w] = {.epoch = cs.epoch(),
                  .step = step,
                  .rank = sessions[w]->rank(),
                  .world_size = kWorkers};
      for (const auto& t : cs.tensors()) {
        const uint64_t cols = t.shape(t.shape_size() - 1);
        buffers[w].push_back(Gradient(
            t.num_elements(), uint32_t(step * 100 + t.tensor_id() * 10 + sessions[w]->rank())));
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
                               .server = server_addresses[c.server_rank()]});
        }
        plans[w].tensors.push_back(std::move(ts));
      }
    }
    // Keep the exact average before the buffers are overwritten.
    std::vector<std::vector<double>> exact(cs.tensors_size());
    for (int i = 0; i < cs.tensors_size(); ++i) {
      exact[i].assign(buffers[0][i].size(), 0.0);
      for (int w = 0; w < kWorkers; ++w) {
        for (size_t k = 0; k < exact[i].size(); ++k) exact[i][k] += buffers[w][i][k] / kWorkers;
      }
    }
    std::vector<absl::StatusOr<worker::StepReport>> reports(kWorkers,
                                                            absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] { reports[w] = engines[w]->Run(plans[w]); });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_TRUE(reports[w].ok()) << "worker " << w << ": " << reports[w].status() << "\n"
                                   << servers[0]->stderr_text() << servers[1]->stderr_text();
      EXPECT_EQ(buffers[w], buffers[0]) << "worker " << w << " step " << step;
    }
    for (int i = 0; i < cs.tensors_size(); ++i) {
      double err = 0, norm = 0;
      for (size_t k = 0; k < exact[i].size(); ++k) {
        err += (buffers[0][i][k] - exact[i][k]) * (buffers[0][i][k] - exact[i][k]);
        norm += exact[i][k] * exact[i][k];
      }
      EXPECT_LT(std::sqrt(err / norm), 0.05) << "tensor " << i;
    }
  }
  for (auto& s : sessions) EXPECT_TRUE(s->Close().ok());
  for (auto& s : servers) {
    ASSERT_TRUE(s->Signal(SIGTERM).ok());
    auto code = s->WaitForExit(absl::Seconds(20));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << s->stderr_text();
  }
  EXPECT_TRUE((*coordinator)->Stop().ok());
}

}  // namespace
}  // namespace gift::server
