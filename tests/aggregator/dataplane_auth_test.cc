// The red team's case on real processes (docs/design.md section 8.2): a
// gift-coordinator with data-plane authentication and a gift-server daemon
// on loopback; a process that never joined (this test's own UCX transport,
// holding no key) reads the server's address from the cluster state and
// pushes chunks claiming rank 0 before the real workers do: unsealed, sealed
// with a key of its own, with a signer that is not the claimed rank, and
// with the MAC the cluster does not use.
// Each is refused and counted on the server's /metrics page by reason, and
// the two real workers (sessions + push-pull engines in this process) then
// get the exact FP32 average, bit for bit, and their PushPull succeeds.
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "tests/daemon/http_get.h"
#include "tests/testing/log_events.h"
#include "tests/testing/server_process.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/subprocess.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

constexpr int kWorkers = 2;

using test::EventField;

// The value of `series` (name and labels, as on the page) or -1.
double Series(const std::string& page, const std::string& series) {
  const size_t at = page.find(absl::StrCat("\n", series, " "));
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + series.size() + 2));
}

std::string AuthSeries(const std::string& reason) {
  return absl::StrCat("gift_server_chunk_auth_failures_total{reason=\"", reason, "\"}");
}

// One FP32 step of every worker over `state`, each sealing with its
// session's keys of the state's epoch, which must be of `mac`: every worker
// ends with the exact average, bit for bit, and no chunk failed its check.
void ExpectExactStep(const std::vector<std::unique_ptr<worker::PushPullEngine>>& engines,
                     const std::vector<std::unique_ptr<control::MemberSession>>& sessions,
                     const gift::v1::ClusterState& state, uint64_t step,
                     dataplane::MacAlgorithm mac) {
  const codec::CodecSpec f32 = codec::ParseCodecSpec("fp32").value();
  const auto world = static_cast<uint32_t>(engines.size());
  std::vector<std::vector<std::vector<float>>> buffers(engines.size());
  std::vector<worker::StepPlan> plans;
  for (size_t w = 0; w < engines.size(); ++w) {
    plans.push_back(test::PlanFromState(state, step, sessions[w]->rank(), world, f32, &buffers[w]));
    plans.back().keys = sessions[w]->chunk_keys(state.epoch());
    ASSERT_NE(plans.back().keys, nullptr) << "worker " << w;
    EXPECT_EQ(plans.back().keys->algorithm, mac) << "worker " << w;
  }
  std::vector<float> exact(buffers[0][0].size(), 0.0f);
  for (const auto& b : buffers) {
    for (size_t k = 0; k < exact.size(); ++k) exact[k] += b[0][k];
  }
  for (float& x : exact) x *= 1.0f / static_cast<float>(world);
  const std::vector<absl::StatusOr<worker::StepReport>> reports = test::RunPlans(engines, plans);
  for (size_t w = 0; w < engines.size(); ++w) {
    ASSERT_TRUE(reports[w].ok()) << "worker " << w << ": " << reports[w].status();
    EXPECT_EQ(buffers[w][0], exact) << "worker " << w;
    for (const auto& [reason, count] : engines[w]->inbox().auth_failures())
      EXPECT_EQ(count, 0) << reason;
  }
}

TEST(DataPlaneAuthTest, ForgedRankFromANonMemberIsRefusedAndTheAverageIsExact) {
  const gift::TempDir dir = test::NewTempDir("gift-dataplane-auth");
  auto coordinator = tools::CoordinatorProcess::Start({.binary = GIFT_COORDINATOR_BIN,
                                                       .state_file = dir.File("state.db"),
                                                       .extra_args = {"--dataplane-auth"}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();
  auto server = test::StartServerProcess({.binary = GIFT_SERVER_BIN,
                                          .coordinator = address,
                                          .name = "shard-0",
                                          .extra_args = {"--metrics-listen", "127.0.0.1:0"}});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string metrics = EventField(**server, "metrics_listening", "address");
  ASSERT_FALSE(metrics.empty()) << (*server)->stderr_text();

  std::vector<std::unique_ptr<worker::PushPullEngine>> engines;
  std::vector<std::unique_ptr<control::MemberSession>> sessions;
  for (int w = 0; w < kWorkers; ++w) {
    auto worker = test::StartUcxWorker(address, absl::StrCat("worker-", w));
    ASSERT_TRUE(worker.ok()) << worker.status();
    EXPECT_TRUE(worker->session->dataplane_auth());
    engines.push_back(std::move(worker->engine));
    sessions.push_back(std::move(worker->session));
  }
  ASSERT_TRUE(sessions[0]->RegisterTensors(test::Float32Specs({{64, 96}})).ok());
  auto state = sessions[0]->WaitFor(test::ClusterReady(kWorkers, 1, 1), absl::Seconds(30));
  ASSERT_TRUE(state.ok()) << state.status();
  const gift::v1::ClusterState& cs = **state;
  ASSERT_TRUE(test::WaitForServing(**server, cs.epoch()).ok()) << (*server)->stderr_text();
  const gift::v1::TensorInfo& tensor = cs.tensors(0);
  const std::string server_address = cs.servers(0).data_address();

  // The intruder: a transport of its own, no session, no key.
  auto intruder = transport::CreateUcxTransport({.on_receive = [](transport::Message) {}});
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  auto peer = (*intruder)->Connect(server_address);
  ASSERT_TRUE(peer.ok()) << peer.status();
  const codec::CodecSpec f32 = codec::ParseCodecSpec("fp32").value();
  const auto& chunk0 = cs.shard_map().chunks(0);
  const uint64_t cols = tensor.shape(1);
  const uint64_t dims[] = {chunk0.num_elements() / cols, cols};
  std::vector<uint8_t> forged(codec::PayloadSizeFor(f32, dims).value());
  {
    const std::vector<float> huge(chunk0.num_elements(), 1000.0f);
    auto view = codec::StartPayload(f32, absl::MakeConstSpan(dims), absl::MakeSpan(forged));
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_TRUE(codec::Encode(huge.data(), *view).ok());
    codec::FinishPayload(absl::MakeSpan(forged));
  }
  const ChunkHeader claim{.kind = ChunkKind::kPush,
                          .epoch = cs.epoch(),
                          .step = 0,
                          .tensor_id = tensor.tensor_id(),
                          .chunk_index = chunk0.index(),
                          .rank = 0,
                          .world_size = kWorkers};
  dataplane::MacKey own_key;
  own_key.fill(0x5a);
  const auto unsealed = dataplane::SerializeChunkHeader(claim);
  // The cluster's MAC is the coordinator's default, ChaCha20-Poly1305.
  constexpr auto kChaCha = dataplane::MacAlgorithm::kChaCha20Poly1305;
  const auto sealed = dataplane::SealChunk(claim, 0, forged, own_key, kChaCha).value();
  const auto wrong_signer = dataplane::SealChunk(claim, 1, forged, own_key, kChaCha).value();
  const auto other_algorithm =
      dataplane::SealChunk(claim, 0, forged, own_key, dataplane::MacAlgorithm::kAes256Gmac).value();
  for (absl::Span<const uint8_t> header :
       {absl::Span<const uint8_t>(unsealed), absl::Span<const uint8_t>(sealed),
        absl::Span<const uint8_t>(wrong_signer), absl::Span<const uint8_t>(other_algorithm)}) {
    ASSERT_TRUE((*intruder)->Send(*peer, header, forged, [](const absl::Status&) {}).ok());
  }
  // All four refused, by reason, before any real push.
  std::string page;
  for (const absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until;
       absl::SleepFor(absl::Milliseconds(50))) {
    page = daemon::testing::HttpGet(metrics, "/metrics");
    if (Series(page, AuthSeries("missing")) == 1 && Series(page, AuthSeries("bad_mac")) == 1 &&
        Series(page, AuthSeries("wrong_signer")) == 1 &&
        Series(page, AuthSeries("unknown_key")) == 1) {
      break;
    }
  }
  EXPECT_EQ(Series(page, AuthSeries("missing")), 1) << page;
  EXPECT_EQ(Series(page, AuthSeries("bad_mac")), 1) << page;
  EXPECT_EQ(Series(page, AuthSeries("wrong_signer")), 1) << page;
  EXPECT_EQ(Series(page, AuthSeries("unknown_key")), 1) << page;  // the other algorithm
  EXPECT_EQ(Series(page, "gift_server_rejected_messages_total{reason=\"UNAUTHENTICATED\"}"), 4);
  EXPECT_EQ(Series(page, "gift_server_pushes_total"), 0) << page;
  EXPECT_TRUE((*server)
                  ->WaitForLine(
                      [](const std::string& l) {
                        return absl::StrContains(l, "\"event\":\"chunk_auth_failed\"") &&
                               absl::StrContains(l, "bad_mac");
                      },
                      absl::Seconds(10))
                  .ok())
      << (*server)->stderr_text();

  // The real workers' step: sealed pushes, checked results, the exact average.
  ASSERT_NO_FATAL_FAILURE(ExpectExactStep(engines, sessions, cs, 0, kChaCha))
      << (*server)->stderr_text();
  page = daemon::testing::HttpGet(metrics, "/metrics");
  EXPECT_EQ(Series(page, "gift_server_pushes_total"), kWorkers * cs.shard_map().chunks_size())
      << page;

  for (auto& s : sessions) EXPECT_TRUE(s->Close().ok());
  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  auto code = (*server)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*server)->stderr_text();
  EXPECT_TRUE((*coordinator)->Stop().ok());
}

// MAC negotiation on real processes (docs/design.md section 8.2): a worker
// that lists no MACs, as a member of a build before negotiation does, puts
// its epochs on AES-256-GMAC; the gift-server daemon and the other worker
// follow the state, and the step is the exact average. Once it has left, a
// worker of this build takes its place and the next epoch is back on
// ChaCha20-Poly1305, its step exact too.
TEST(DataPlaneAuthTest, AnOlderBuildsMemberPutsItsEpochsOnGmacAndEveryStepIsExact) {
  const gift::TempDir dir = test::NewTempDir("gift-dataplane-mac");
  auto coordinator = tools::CoordinatorProcess::Start({.binary = GIFT_COORDINATOR_BIN,
                                                       .state_file = dir.File("state.db"),
                                                       .extra_args = {"--dataplane-auth"}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();
  auto server = test::StartServerProcess(
      {.binary = GIFT_SERVER_BIN, .coordinator = address, .name = "shard-0"});
  ASSERT_TRUE(server.ok()) << server.status();

  std::vector<std::unique_ptr<worker::PushPullEngine>> engines;
  std::vector<std::unique_ptr<control::MemberSession>> sessions;
  control::MemberSessionOptions older_build;
  older_build.dataplane_macs.clear();
  for (const auto& [name, options] : {std::pair{"worker-0", control::MemberSessionOptions{}},
                                      std::pair{"worker-1", older_build}}) {
    auto worker = test::StartUcxWorker(address, name, absl::Seconds(30), options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    engines.push_back(std::move(worker->engine));
    sessions.push_back(std::move(worker->session));
  }
  ASSERT_TRUE(sessions[0]->RegisterTensors(test::Float32Specs({{64, 96}})).ok());
  auto mixed = sessions[0]->WaitFor(test::ClusterReady(kWorkers, 1, 1), absl::Seconds(30));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ((*mixed)->dataplane_mac(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  for (auto& session : sessions) {
    const uint64_t epoch = (*mixed)->epoch();
    ASSERT_TRUE(
        session
            ->WaitFor([epoch](const gift::v1::ClusterState& s) { return s.epoch() >= epoch; },
                      absl::Seconds(30))
            .ok());
  }
  ASSERT_TRUE(test::WaitForServing(**server, (*mixed)->epoch()).ok()) << (*server)->stderr_text();
  ASSERT_NO_FATAL_FAILURE(
      ExpectExactStep(engines, sessions, **mixed, 0, dataplane::MacAlgorithm::kAes256Gmac))
      << (*server)->stderr_text();

  // The older build's worker leaves; one of this build joins.
  EXPECT_TRUE(sessions[1]->Close().ok());
  sessions.pop_back();
  engines.pop_back();
  auto newer = test::StartUcxWorker(address, "worker-2");
  ASSERT_TRUE(newer.ok()) << newer.status();
  engines.push_back(std::move(newer->engine));
  sessions.push_back(std::move(newer->session));
  const uint64_t mixed_epoch = (*mixed)->epoch();
  auto ready = test::ClusterReady(kWorkers, 1, 1);
  auto after = sessions[0]->WaitFor(
      [&](const gift::v1::ClusterState& s) { return s.epoch() > mixed_epoch && ready(s); },
      absl::Seconds(30));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->dataplane_mac(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  const uint64_t epoch = (*after)->epoch();
  ASSERT_TRUE(sessions[1]
                  ->WaitFor([epoch](const gift::v1::ClusterState& s) { return s.epoch() >= epoch; },
                            absl::Seconds(30))
                  .ok());
  ASSERT_TRUE(test::WaitForServing(**server, epoch).ok()) << (*server)->stderr_text();
  ASSERT_NO_FATAL_FAILURE(
      ExpectExactStep(engines, sessions, **after, 1, dataplane::MacAlgorithm::kChaCha20Poly1305))
      << (*server)->stderr_text();

  for (auto& session : sessions) EXPECT_TRUE(session->Close().ok());
  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  auto code = (*server)->WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*server)->stderr_text();
  EXPECT_TRUE((*coordinator)->Stop().ok());
}

}  // namespace
}  // namespace gift::server
