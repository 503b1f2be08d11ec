// StepExchange (worker/daemon/step_exchange.h) and StepSketches
// (step_sketches.h) against a real cluster on loopback: a gift-coordinator
// (child process), one aggregator shard over UCX with its daemon in this
// process, and in-process workers (member sessions and push-pull engines),
// each with its own StepExchange. An exchange averages every rank's tensor;
// a failure that is not retryable is returned as it is; a step that a new
// epoch aborts under it (a worker joins) is planned again under the new epoch
// and counted once per rank. The sketches of a collect step reach every
// worker, the same bits on each, and a sketch exchange that a peer misses
// fails alone, counted, leaving no average.
#include "worker/daemon/step_exchange.h"

#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "server/aggregator/aggregator_daemon.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "worker/daemon/step_sketches.h"

namespace gift::worker {
namespace {

constexpr uint64_t kRows = 16, kCols = 64;

// A worker: its session and engine, its guard and store, its exchange and
// its gradient.
struct Member {
  test::UcxWorker ucx;
  std::unique_ptr<BasisStore> store;
  MembershipGuard guard;
  std::unique_ptr<StepExchange> exchange;
  std::unique_ptr<StepSketches> sketches;
  std::vector<float> gradient;

  LocalTensor Tensor(uint64_t tensor_id) {
    return LocalTensor{.tensor_id = tensor_id,
                       .name = "layer.w",
                       .rows = kRows,
                       .cols = kCols,
                       .data = gradient.data()};
  }
};

class StepExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto coordinator = tools::CoordinatorProcess::Start(
        {.binary = GIFT_COORDINATOR_BIN, .state_file = dir_.File("state.db")});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    auto shard = server::AggregatorShard::Create(
        {.reducer = {.pull_spec = codec::ParseCodecSpec("bf16").value()}},
        [](auto h) { return transport::CreateUcxTransport(std::move(h)); });
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *std::move(shard);
    control::MemberSessionOptions options;
    options.name = "shard-0";
    options.role = gift::v1::MEMBER_ROLE_SERVER;
    options.data_address = shard_->address();
    auto session = control::MemberSession::Start(
        control::CoordinatorClient::MakeChannel(coordinator_->address()), options);
    ASSERT_TRUE(session.ok()) << session.status();
    server_session_ = *std::move(session);
    daemon_ = std::make_unique<server::AggregatorDaemon>(shard_.get(), server_session_.get());
  }

  void TearDown() override {
    for (auto& m : members_) {
      m->sketches.reset();
      m->exchange.reset();
      if (m->ucx.session != nullptr) (void)m->ucx.session->Close();
      m->ucx.session.reset();
      m->ucx.engine.reset();
    }
    members_.clear();
    daemon_.reset();
    if (server_session_ != nullptr) (void)server_session_->Close();
    if (coordinator_ != nullptr) (void)coordinator_->Stop();
  }

  // A worker that joined; its exchange reads the run of `state_` at its call.
  Member& AddWorker() {
    auto m = std::make_unique<Member>();
    auto w = test::StartUcxWorker(coordinator_->address(), absl::StrCat("worker-", members_.size()),
                                  absl::Seconds(20));
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) m->ucx = *std::move(w);
    m->store = std::make_unique<BasisStore>(m->ucx.session.get());
    control::MemberSession* session = m->ucx.session.get();
    m->exchange = std::make_unique<StepExchange>(
        m->ucx.engine.get(), session, m->store.get(), &m->guard,
        StepExchange::WorkerView{.run = [session] { return RunSteps(session->state()->run()); },
                                 .last_step = [] { return std::optional<uint64_t>(); }});
    m->sketches = std::make_unique<StepSketches>(session, m->exchange.get(), nullptr,
                                                 /*timeout=*/absl::Seconds(5));
    m->gradient.assign(kRows * kCols, 0.0f);
    members_.push_back(std::move(m));
    return *members_.back();
  }

  // Waits until the cluster has `workers` workers, `tensors` tensors and the
  // shard, and the shard serves that epoch; returns the first tensor's id.
  uint64_t WaitReady(int workers, int tensors = 1) {
    auto state = members_[0]->ucx.session->WaitFor(test::ClusterReady(workers, 1, tensors),
                                                   absl::Seconds(30));
    EXPECT_TRUE(state.ok()) << state.status();
    if (!state.ok()) return 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline &&
           (shard_->epoch() != (*state)->epoch() || daemon_->workers() != size_t(workers))) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    for (auto& m : members_) {
      EXPECT_TRUE(
          m->ucx.session
              ->WaitFor(
                  [&](const gift::v1::ClusterState& s) { return s.epoch() >= (*state)->epoch(); },
                  absl::Seconds(20))
              .ok());
    }
    return (*state)->tensors(0).tensor_id();
  }

  std::future<absl::StatusOr<Exchanged>> RunAsync(Member& m, uint64_t step, uint64_t tensor,
                                                  absl::Duration timeout) {
    return std::async(std::launch::async, [&m, step, tensor, timeout] {
      return m.exchange->Run(step, {m.Tensor(tensor)}, ExchangeKind::kExactMeasure,
                             absl::Now() + timeout);
    });
  }

  gift::TempDir dir_ = test::NewTempDir("gift-step-exchange");
  std::unique_ptr<tools::CoordinatorProcess> coordinator_;
  std::unique_ptr<server::AggregatorShard> shard_;
  std::unique_ptr<control::MemberSession> server_session_;
  std::unique_ptr<server::AggregatorDaemon> daemon_;
  std::vector<std::unique_ptr<Member>> members_;
};

TEST_F(StepExchangeTest, EveryRankGetsTheExactAverageUnderTheEpochItRanIn) {
  AddWorker();
  AddWorker();
  ASSERT_TRUE(members_[0]->ucx.session->RegisterTensors(test::Float32Specs({{16, 64}})).ok());
  const uint64_t tensor = WaitReady(2);
  for (size_t k = 0; k < kRows * kCols; ++k) {
    members_[0]->gradient[k] = 1.0f + k;
    members_[1]->gradient[k] = 3.0f + k;
  }
  auto a = RunAsync(*members_[0], 0, tensor, absl::Seconds(30));
  auto b = RunAsync(*members_[1], 0, tensor, absl::Seconds(30));
  for (auto* f : {&a, &b}) {
    absl::StatusOr<Exchanged> done = f->get();
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->epoch, shard_->epoch());
    EXPECT_EQ(done->world_size, 2u);
    ASSERT_EQ(done->versions.size(), 1u);
    EXPECT_FALSE(done->versions[0].second);  // direct: a measurement is FP32
  }
  for (auto& m : members_) {
    for (size_t k = 0; k < kRows * kCols; ++k) {
      ASSERT_EQ(m->gradient[k], 2.0f + k) << k;  // FP32 both ways: exact
    }
  }
  EXPECT_EQ(members_[0]->exchange->retries(), 0u);
}

TEST_F(StepExchangeTest, TheReportCountsEachTensorsOwnBytesInItsOwnCodec) {
  AddWorker();
  AddWorker();
  // A matrix (pushed in E4M3, block 128: about a byte per element) and a
  // vector of as many elements (BF16: two bytes per element).
  ASSERT_TRUE(members_[0]
                  ->ucx.session->RegisterTensors(test::Float32Specs({{16, 64}, {kRows * kCols}}))
                  .ok());
  WaitReady(2, 2);
  std::shared_ptr<const gift::v1::ClusterState> state = members_[0]->ucx.session->state();
  std::vector<std::vector<float>> vectors(2, std::vector<float>(kRows * kCols, 0.5f));
  std::vector<std::future<absl::StatusOr<Exchanged>>> runs;
  for (size_t w = 0; w < 2; ++w) {
    Member* m = members_[w].get();
    std::vector<LocalTensor> tensors = {m->Tensor(state->tensors(0).tensor_id()),
                                        {.tensor_id = state->tensors(1).tensor_id(),
                                         .name = state->tensors(1).name(),
                                         .rows = 1,
                                         .cols = kRows * kCols,
                                         .data = vectors[w].data()}};
    for (float& x : m->gradient) x = 0.25f;
    runs.push_back(std::async(std::launch::async, [m, tensors] {
      return m->exchange->Run(0, tensors, ExchangeKind::kGradients,
                              absl::Now() + absl::Seconds(30));
    }));
  }
  for (auto& r : runs) {
    absl::StatusOr<Exchanged> done = r.get();
    ASSERT_TRUE(done.ok()) << done.status();
    const StepReport& report = done->report;
    const StepReport::TensorBytes matrix = report.bytes_of(0), vector = report.bytes_of(1);
    EXPECT_EQ(matrix.pushed + vector.pushed, report.bytes_pushed);
    EXPECT_EQ(matrix.pulled + vector.pulled, report.bytes_pulled);
    EXPECT_GT(matrix.pushed, kRows * kCols);
    EXPECT_GT(static_cast<double>(vector.pushed), 1.8 * static_cast<double>(matrix.pushed))
        << matrix.pushed << " " << vector.pushed;
  }
}

TEST_F(StepExchangeTest, AFailureThatNoEpochCanMendIsReturnedAsItIs) {
  AddWorker();
  AddWorker();
  ASSERT_TRUE(members_[0]->ucx.session->RegisterTensors(test::Float32Specs({{16, 64}})).ok());
  const uint64_t tensor = WaitReady(2);
  // Rank 1 never pushes: rank 0's results time out in the engine
  // (DeadlineExceeded, not retryable), long before the exchange's deadline.
  const absl::Time start = absl::Now();
  absl::StatusOr<Exchanged> done = members_[0]->exchange->Run(
      0, {members_[0]->Tensor(tensor)}, ExchangeKind::kExactMeasure, start + absl::Seconds(60),
      /*result_timeout=*/absl::Seconds(1));
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded) << done.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(members_[0]->exchange->retries(), 0u);
  EXPECT_FALSE(StepExchange::Retryable(done.status()));
  EXPECT_TRUE(StepExchange::Retryable(absl::AbortedError("epoch ended")));
  EXPECT_TRUE(StepExchange::Retryable(absl::UnavailableError("server gone")));
}

TEST_F(StepExchangeTest, AStepANewEpochAbortsRunsAgainInItCountingEachRankOnce) {
  AddWorker();
  AddWorker();
  ASSERT_TRUE(members_[0]->ucx.session->RegisterTensors(test::Float32Specs({{16, 64}})).ok());
  const uint64_t tensor = WaitReady(2);
  for (size_t k = 0; k < kRows * kCols; ++k) members_[0]->gradient[k] = 4.0f;
  // Rank 0 pushes step 0 and waits for rank 1, which has not begun; a third
  // worker joins: the new epoch aborts the step at the shard, and rank 0
  // runs it again in the epoch of three.
  auto first = RunAsync(*members_[0], 0, tensor, absl::Seconds(60));
  absl::SleepFor(absl::Milliseconds(300));
  AddWorker();
  WaitReady(3);
  for (size_t k = 0; k < kRows * kCols; ++k) {
    members_[1]->gradient[k] = 8.0f;
    members_[2]->gradient[k] = 12.0f;
  }
  auto second = RunAsync(*members_[1], 0, tensor, absl::Seconds(60));
  auto third = RunAsync(*members_[2], 0, tensor, absl::Seconds(60));
  for (auto* f : {&first, &second, &third}) {
    absl::StatusOr<Exchanged> done = f->get();
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->world_size, 3u);
  }
  for (auto& m : members_) {
    for (size_t k = 0; k < kRows * kCols; ++k) ASSERT_EQ(m->gradient[k], 8.0f) << k;
  }
  EXPECT_GE(members_[0]->exchange->retries(), 1u);
  EXPECT_EQ(members_[1]->exchange->retries(), 0u);
}

using StepSketchesTest = StepExchangeTest;

TEST_F(StepSketchesTest, TheSketchesOfACollectStepReachEveryWorkerAndAMissedOneFailsAlone) {
  AddWorker();
  AddWorker();
  // Every 2-D tensor through a basis, statistics from per-worker sketches.
  control::CoordinatorClient coordinator(
      control::CoordinatorClient::MakeChannel(coordinator_->address()), absl::Seconds(30));
  auto policy = coordinator.GetPolicy();
  ASSERT_TRUE(policy.ok()) << policy.status();
  gift::v1::Policy gift = *policy;
  gift.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  gift.mutable_selection()->add_include("*");
  gift.mutable_transform()->set_source(gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS);
  ASSERT_TRUE(coordinator.SetPolicy(gift, policy->version()).ok());
  ASSERT_TRUE(members_[0]->ucx.session->RegisterTensors(test::Float32Specs({{16, 64}})).ok());
  const uint64_t tensor = WaitReady(2);
  for (size_t k = 0; k < kRows * kCols; ++k) {
    members_[0]->gradient[k] = std::sin(0.1f * k);
    members_[1]->gradient[k] = std::cos(0.3f * k);
  }
  // The first steps: those that collect exchange sketches (registering the
  // statistics tensor the first time), both workers alike, until one step's
  // exchange succeeded on both (on a loaded machine the first one may miss
  // its timeout: then it is counted as a failure on each, and nothing else).
  int collected = 0;
  uint64_t step = 0;
  for (; step < 6 && collected == 0; ++step) {
    std::vector<StepSketches::Counters> before;
    for (auto& m : members_) before.push_back(m->sketches->counters());
    std::vector<std::future<StepSketches::Cost>> costs;
    for (auto& m : members_) {
      Member* w = m.get();
      costs.push_back(std::async(std::launch::async, [w, step, tensor] {
        w->sketches->Prepare(*w->ucx.session->state(), step, {w->Tensor(tensor)});
        return w->sketches->Exchange(step, absl::Now() + absl::Seconds(30));
      }));
    }
    const StepSketches::Cost a = costs[0].get(), b = costs[1].get();
    for (size_t w = 0; w < members_.size(); ++w) {
      const StepSketches::Counters c = members_[w]->sketches->counters();
      EXPECT_LE(c.exchanges + c.failures - before[w].exchanges - before[w].failures, 1u);
    }
    if (a.exchange.bytes_pushed == 0 || b.exchange.bytes_pushed == 0) continue;
    ++collected;
    EXPECT_GT(a.compute_seconds, 0.0);
    const absl::Span<const float> x = members_[0]->sketches->Average(tensor);
    const absl::Span<const float> y = members_[1]->sketches->Average(tensor);
    ASSERT_FALSE(x.empty());
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
  }
  ASSERT_EQ(collected, 1) << "no step of the first six exchanged sketches";
  for (auto& m : members_) {
    const StepSketches::Counters c = m->sketches->counters();
    EXPECT_GE(c.exchanges, 1u);
    EXPECT_GT(c.bytes_pushed, 0u);
    EXPECT_GT(c.bytes_pulled, 0u);
  }
  // A collect step that worker 1 misses: worker 0's exchange fails within
  // its timeout (5 s), counted, and leaves no average; the step would stand.
  uint64_t next = step;
  for (; next < step + 64; ++next) {  // the next collect step
    members_[0]->sketches->Prepare(*members_[0]->ucx.session->state(), next,
                                   {members_[0]->Tensor(tensor)});
    if (!members_[0]->sketches->Average(tensor).empty()) break;
  }
  ASSERT_LT(next, step + 64) << "no later collect step";
  const StepSketches::Counters before = members_[0]->sketches->counters();
  const absl::Time start = absl::Now();
  const StepSketches::Cost missed =
      members_[0]->sketches->Exchange(next, start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_EQ(missed.exchange.bytes_pushed, 0u);
  EXPECT_TRUE(members_[0]->sketches->Average(tensor).empty());
  EXPECT_EQ(members_[0]->sketches->counters().failures, before.failures + 1);
  EXPECT_EQ(members_[0]->sketches->counters().exchanges, before.exchanges);
}

}  // namespace
}  // namespace gift::worker
