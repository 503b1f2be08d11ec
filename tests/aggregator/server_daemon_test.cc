// Real processes on loopback: gift-coordinator and two gift-server daemons;
// four workers in this process (member sessions + push-pull engines over
// UCX) drive steps through the servers.
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/member_session.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/subprocess.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::server {
namespace {

constexpr int kWorkers = 4, kServers = 2;

TEST(ServerDaemonTest, WorkersAverageThroughTwoServerProcesses) {
  const gift::TempDir dir = test::NewTempDir("gift-server-daemon");
  auto coordinator = tools::CoordinatorProcess::Start(
      {.binary = GIFT_COORDINATOR_BIN, .state_file = dir.File("state.db")});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();

  std::vector<std::unique_ptr<tools::Subprocess>> servers;
  for (int s = 0; s < kServers; ++s) {
    auto p = test::StartServerProcess(
        {.binary = GIFT_SERVER_BIN, .coordinator = address, .name = absl::StrCat("shard-", s)});
    ASSERT_TRUE(p.ok()) << p.status();
    servers.push_back(*std::move(p));
  }

  std::vector<std::unique_ptr<worker::PushPullEngine>> engines;
  std::vector<std::unique_ptr<control::MemberSession>> sessions;
  for (int w = 0; w < kWorkers; ++w) {
    auto worker = test::StartUcxWorker(address, absl::StrCat("worker-", w));
    ASSERT_TRUE(worker.ok()) << worker.status();
    engines.push_back(std::move(worker->engine));
    sessions.push_back(std::move(worker->session));
  }
  ASSERT_TRUE(sessions[0]->RegisterTensors(test::Float32Specs({{64, 96}, {33, 50}, {1000}})).ok());
  auto state =
      sessions[0]->WaitFor(test::ClusterReady(kWorkers, kServers, 3), absl::Seconds(30));
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
    const absl::Status serving = test::WaitForServing(*servers[s], cs.epoch(), chunks);
    ASSERT_TRUE(serving.ok()) << serving << servers[s]->stderr_text();
  }

  // Plans from the cluster state.
  for (uint64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<std::vector<float>>> buffers(kWorkers);
    std::vector<worker::StepPlan> plans(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      plans[w] = test::PlanFromState(cs, step, sessions[w]->rank(), kWorkers,
                                     codec::ParseCodecSpec("e4m3/block32").value(), &buffers[w]);
    }
    // Keep the exact average before the buffers are overwritten.
    std::vector<std::vector<double>> exact(cs.tensors_size());
    for (int i = 0; i < cs.tensors_size(); ++i) {
      exact[i].assign(buffers[0][i].size(), 0.0);
      for (int w = 0; w < kWorkers; ++w) {
        for (size_t k = 0; k < exact[i].size(); ++k) exact[i][k] += buffers[w][i][k] / kWorkers;
      }
    }
    const std::vector<absl::StatusOr<worker::StepReport>> reports =
        test::RunPlans(engines, plans);
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
