// Workers' push-pull engines against aggregator shards on real transports
// (in-process and UCX loopback): every worker ends with the same bits, equal
// to a local re-computation of what the servers do.
#include "worker/engine/push_pull_engine.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "common/dataplane/chunk_header.h"
#include "common/transform/identity_transform.h"
#include "common/transform/rotated_transform.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transport/inproc/inproc_transport.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/transform/test_util.h"
#include "tests/worker/engine_rig.h"
#include "tests/worker/engine_test_util.h"
#include "tests/worker/hand_server.h"

namespace gift::worker {
namespace {

constexpr uint32_t kWorld = 4;
constexpr int kServers = 2;

using testing::Gradient;
using testing::HandServer;
using testing::Routes;
using testing::Tensor;

const std::vector<Tensor> kTensors = {
    {1, 64, 96, 16, true},   // GIFT basis, 4 chunks of whole rows
    {2, 33, 50, 10, false},  // direct, 4 chunks (the last of 3 rows)
    {3, 1, 1000, 0, false},  // direct, a single row cut into 512 + 488
};

class PushPullEngineTest : public ::testing::TestWithParam<bool /*ucx*/> {
 protected:
  transport::TransportFactory Factory() { return rig_.Factory(); }

  void SetUp() override {
    ASSERT_TRUE(rig_.Start({.servers = kServers,
                            .workers = kWorld,
                            .pull = codec::ParseCodecSpec("bf16").value(),
                            .ucx = GetParam()})
                    .ok());
    const auto factors = transform::testing::SampleFactors(64, 96, 5, 3);
    basis_ = std::make_shared<transform::TensorBasisTransform>(
        transform::TensorBasis::Create(
            {.tensor_id = 1, .version = 1, .d_out = 64, .d_in = 96, .config = {}},
            transform::SideBasis::FromFactor(factors.out, 16).value(),
            transform::SideBasis::FromFactor(factors.in, 16).value())
            .value());
  }

  // Installs `epoch` with the first `world` engines on every shard.
  void SetEpoch(uint64_t epoch, uint32_t world) {
    ASSERT_TRUE(rig_.SetEpoch(epoch, rig_.OnServers(kTensors), world).ok());
  }

  StepPlan Plan(uint64_t epoch, uint64_t step, uint32_t rank, uint32_t world,
                std::vector<std::vector<float>>& buffers) {
    StepPlan plan{.epoch = epoch,
                  .step = step,
                  .rank = rank,
                  .world_size = world};
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const Tensor& t = kTensors[i];
      plan.tensors.push_back({.tensor_id = t.id,
                              .rows = t.rows,
                              .cols = t.cols,
                              .data = buffers[i].data(),
                              .transform = t.transformed ? basis_ : nullptr,
                              .basis_version = t.transformed ? 1u : 0u,
                              .chunks = Routes(t, rig_.servers),
                              .push_spec = codec::ParseCodecSpec("e4m3/block32").value()});
    }
    return plan;
  }

  testing::EngineRig rig_;
  std::shared_ptr<const transform::GradientTransform> basis_;
};

// What the servers compute for a tensor, done locally.
std::vector<float> LocalAverage(const Tensor& t, uint64_t step,
                                const std::vector<std::string>& servers,
                                const transform::GradientTransform* transform) {
  return testing::LocalAverage(t, step, kWorld, servers,
                               codec::ParseCodecSpec("e4m3/block32").value(),
                               codec::ParseCodecSpec("bf16").value(), transform);
}

TEST_P(PushPullEngineTest, EveryWorkerGetsTheServersAverage) {
  SetEpoch(1, kWorld);
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<std::vector<std::vector<float>>> buffers(kWorld);
    for (uint32_t r = 0; r < kWorld; ++r) {
      for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, step));
    }
    std::vector<absl::StatusOr<StepReport>> reports(kWorld, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kWorld; ++r) {
      threads.emplace_back(
          [&, r] { reports[r] = rig_.engines[r]->Run(Plan(1, step, r, kWorld, buffers[r])); });
    }
    for (auto& th : threads) th.join();
    for (uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
      EXPECT_GT(reports[r]->bytes_pushed, 0u);
      for (size_t i = 0; i < kTensors.size(); ++i) {
        EXPECT_EQ(buffers[r][i], buffers[0][i]) << "rank " << r << " tensor " << kTensors[i].id;
      }
    }
    // Direct tensors: bit-exact with the local computation.
    for (size_t i = 1; i < kTensors.size(); ++i) {
      const std::vector<float> want = LocalAverage(kTensors[i], step, rig_.servers, nullptr);
      for (const ChunkRoute& c : Routes(kTensors[i], rig_.servers)) {
        const std::vector<float> got(buffers[0][i].begin() + c.offset,
                                     buffers[0][i].begin() + c.offset + c.num_elements);
        const std::vector<float> chunk(want.begin() + c.offset,
                                       want.begin() + c.offset + c.num_elements);
        EXPECT_EQ(got, chunk) << "tensor " << kTensors[i].id << " chunk " << c.index;
      }
    }
    // The transformed tensor too: T^{-1} of the decoded chunks of the
    // servers' sum of T(G_r).
    EXPECT_EQ(buffers[0][0], LocalAverage(kTensors[0], step, rig_.servers, basis_.get()));
    // The transformed tensor: close to the exact average.
    std::vector<float> exact(64 * 96, 0.0f);
    for (uint32_t r = 0; r < kWorld; ++r) {
      const auto g = Gradient(kTensors[0], r, step);
      for (size_t k = 0; k < g.size(); ++k) exact[k] += g[k] / kWorld;
    }
    EXPECT_LT(RelativeL2(buffers[0][0], exact), 0.05);
  }
}

// With the policy's rotation (TensorStep::rotation_block) every worker
// rotates its rows after the transform, the servers sum in the rotated
// coordinates, and each worker undoes the rotation once: the bits of the
// local computation with the rotated transform, on every rank, step after
// step (the engine keeps one rotated transform per tensor), and not those
// without the rotation.
TEST_P(PushPullEngineTest, RotatedTensorsGetTheServersAverageInRotatedCoordinates) {
  SetEpoch(1, kWorld);
  const std::map<size_t, uint32_t> blocks = {{0, 32}, {2, 8}};  // tensor index -> block
  for (uint64_t step = 0; step < 2; ++step) {
    std::vector<std::vector<std::vector<float>>> buffers(kWorld);
    std::vector<absl::StatusOr<StepReport>> reports(kWorld, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kWorld; ++r) {
      for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, step));
    }
    for (uint32_t r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        StepPlan plan = Plan(1, step, r, kWorld, buffers[r]);
        for (const auto& [i, block] : blocks) plan.tensors[i].rotation_block = block;
        reports[r] = rig_.engines[r]->Run(plan);
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& [i, block] : blocks) {
      const Tensor& t = kTensors[i];
      std::shared_ptr<const transform::GradientTransform> inner =
          t.transformed ? basis_
                        : std::make_shared<transform::IdentityTransform>(
                              transform::IdentityTransform::Create(t.rows, t.cols).value());
      const auto rotated = transform::RotatedTransform::Create(inner, block).value();
      const std::vector<float> want = LocalAverage(t, step, rig_.servers, rotated.get());
      const std::vector<float> unrotated =
          LocalAverage(t, step, rig_.servers, t.transformed ? basis_.get() : nullptr);
      for (uint32_t r = 0; r < kWorld; ++r) {
        ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
        EXPECT_EQ(buffers[r][i], want) << "rank " << r << " tensor " << t.id << " step " << step;
      }
      EXPECT_NE(want, unrotated) << "tensor " << t.id;
    }
    // The tensor without a rotation is as before.
    EXPECT_EQ(buffers[0][1], LocalAverage(kTensors[1], step, rig_.servers, nullptr));
  }
}

// Workers whose plans list the tensors (and a tensor's chunks) in different
// orders push in one shared order and end with the bits of the sequential
// computation (LocalAverage: chunk by chunk, in order).
TEST_P(PushPullEngineTest, PlanOrderDoesNotChangeTheBits) {
  SetEpoch(1, kWorld);
  const uint64_t step = 4;
  std::vector<std::vector<std::vector<float>>> buffers(kWorld);
  std::vector<StepPlan> plans;
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, step));
    StepPlan plan = Plan(1, step, r, kWorld, buffers[r]);
    std::rotate(plan.tensors.begin(), plan.tensors.begin() + r % plan.tensors.size(),
                plan.tensors.end());
    if (r % 2 == 1) {
      for (TensorStep& t : plan.tensors) std::reverse(t.chunks.begin(), t.chunks.end());
    }
    plans.push_back(std::move(plan));
  }
  const auto reports = rig_.Run(plans);
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const std::vector<float> want = LocalAverage(
          kTensors[i], step, rig_.servers, kTensors[i].transformed ? basis_.get() : nullptr);
      EXPECT_EQ(buffers[r][i], want) << "rank " << r << " tensor " << kTensors[i].id;
    }
  }
}

TEST_P(PushPullEngineTest, AnEpochChangeAbortsTheStep) {
  SetEpoch(1, kWorld);
  std::vector<std::vector<std::vector<float>>> buffers(kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, 0));
  }
  const auto before = buffers;
  std::vector<absl::StatusOr<StepReport>> reports(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r) {  // rank 3 never pushes
    threads.emplace_back(
        [&, r] { reports[r] = rig_.engines[r]->Run(Plan(1, 0, r, kWorld, buffers[r])); });
  }
  // Wait until the three have pushed, then the epoch ends.
  for (int i = 0; i < 2000; ++i) {
    uint64_t accepted = 0;
    for (auto& s : rig_.shards) accepted += s->counters().pushes_accepted;
    if (accepted == 3 * 10) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  SetEpoch(2, 3);
  for (auto& th : threads) th.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(reports[r].status().code(), absl::StatusCode::kAborted) << reports[r].status();
    EXPECT_EQ(buffers[r], before[r]);  // untouched
  }
  // The step runs again under epoch 2 with three workers.
  threads.clear();
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back(
        [&, r] { reports[r] = rig_.engines[r]->Run(Plan(2, 0, r, 3, buffers[r])); });
  }
  for (auto& th : threads) th.join();
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(reports[r].ok()) << reports[r].status();
  EXPECT_EQ(buffers[1], buffers[0]);
}

TEST_P(PushPullEngineTest, RefusesBadPlansAndTimesOut) {
  SetEpoch(1, kWorld);
  std::vector<std::vector<float>> buffers;
  for (const Tensor& t : kTensors) buffers.push_back(Gradient(t, 0, 0));
  StepPlan plan = Plan(1, 0, 0, kWorld, buffers);
  plan.tensors[1].chunks.pop_back();  // no longer tiles the tensor
  EXPECT_EQ(rig_.engines[0]->Run(plan).status().code(), absl::StatusCode::kInvalidArgument);
  plan = Plan(1, 0, 4, kWorld, buffers);
  EXPECT_EQ(rig_.engines[0]->Run(plan).status().code(), absl::StatusCode::kInvalidArgument);
  auto quick = PushPullEngine::Create(Factory(), {.timeout = absl::Milliseconds(200)});
  ASSERT_TRUE(quick.ok());
  EXPECT_EQ((*quick)->Run(Plan(1, 0, 0, kWorld, buffers)).status().code(),
            absl::StatusCode::kDeadlineExceeded);  // the other ranks never push
}

// The buffers follow the plan: a push spec that alternates (as a measured
// step's FP32 exchange does; FP32 sums depend on the servers' arrival order,
// so two quantized specs here) and a tensor switching between direct and its
// basis still give the exact local results every step.
TEST_P(PushPullEngineTest, BuffersFollowSpecAndTransformChanges) {
  SetEpoch(1, kWorld);
  const codec::CodecSpec specs[] = {codec::ParseCodecSpec("e4m3/block32").value(),
                                    codec::ParseCodecSpec("e5m2/tensor").value()};
  for (uint64_t step = 0; step < 6; ++step) {
    const codec::CodecSpec& spec = specs[step % 2];
    const bool transformed = (step / 2) % 2 == 0;
    std::vector<std::vector<std::vector<float>>> buffers(kWorld);
    std::vector<StepPlan> plans;
    for (uint32_t r = 0; r < kWorld; ++r) {
      for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, step));
      plans.push_back(Plan(1, step, r, kWorld, buffers[r]));
      for (TensorStep& t : plans.back().tensors) t.push_spec = spec;
      if (!transformed) plans.back().tensors[0].transform = nullptr;
    }
    const auto reports = rig_.Run(plans);
    for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(reports[r].ok()) << reports[r].status();
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const transform::GradientTransform* t = i == 0 && transformed ? basis_.get() : nullptr;
      EXPECT_EQ(buffers[0][i], testing::LocalAverage(kTensors[i], step, kWorld, rig_.servers, spec,
                                                     codec::ParseCodecSpec("bf16").value(), t))
          << "step " << step << " tensor " << kTensors[i].id;
    }
  }
}

// Error feedback through the engine (the encoder pipeline's residual, kept
// across steps): with the same gradients every step, each step without it
// repeats the same rounding error, while with it the time average of the
// results converges towards the exact average.
TEST_P(PushPullEngineTest, ErrorFeedbackMakesTheTimeAverageConverge) {
  SetEpoch(1, kWorld);
  constexpr int kSteps = 16;
  const Tensor& t = kTensors[1];  // direct
  std::vector<float> exact(t.rows * t.cols, 0.0f);
  for (uint32_t r = 0; r < kWorld; ++r) {
    const auto g = Gradient(t, r, 0);
    for (size_t k = 0; k < g.size(); ++k) exact[k] += g[k] / kWorld;
  }
  double error[2];
  for (const bool feedback : {false, true}) {
    std::vector<double> sum(exact.size(), 0.0);
    for (int s = 0; s < kSteps; ++s) {
      const uint64_t step = (feedback ? 100 : 0) + s;
      std::vector<std::vector<std::vector<float>>> buffers(kWorld);
      std::vector<StepPlan> plans;
      for (uint32_t r = 0; r < kWorld; ++r) {
        for (const Tensor& u : kTensors) buffers[r].push_back(Gradient(u, r, 0));
        plans.push_back(Plan(1, step, r, kWorld, buffers[r]));
        plans.back().tensors[1].error_feedback = feedback;
      }
      const auto reports = rig_.Run(plans);
      for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(reports[r].ok()) << reports[r].status();
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += buffers[0][1][k];
    }
    std::vector<float> mean(sum.size());
    for (size_t k = 0; k < sum.size(); ++k) mean[k] = static_cast<float>(sum[k] / kSteps);
    error[feedback] = RelativeL2(mean, exact);
  }
  std::cout << "[ ef       ] time average over " << kSteps << " steps: rel_l2 without EF "
            << error[0] << ", with EF " << error[1] << "\n";
  EXPECT_LT(error[1], 0.3 * error[0]);
}

// Results of an earlier step and duplicates are strays and never land over
// a slot's live result, and a second step places results into the slots the
// first sized.
TEST(PushPullEngineResults, StaleAndDuplicateResultsNeverLandOverLiveOnes) {
  constexpr uint64_t kCols = HandServer::kCols;
  constexpr auto kResult = dataplane::ChunkKind::kResult;
  HandServer rig;
  ASSERT_NO_FATAL_FAILURE(rig.SetUp());
  std::vector<float> grad(2 * kCols, 0.5f);
  for (uint64_t step = 1; step <= 3; ++step) {
    const StepPlan plan = rig.Plan(1, step, 1, grad.data());
    absl::StatusOr<StepReport> report = absl::UnknownError("not run");
    std::thread run([&] { report = rig.engine().Run(plan); });
    ASSERT_TRUE(rig.AwaitPushes(2 * step));
    const uint64_t strays = rig.engine().inbox().stray_messages();
    rig.Send(kResult, 1, step - 1, 1, 1, 99.0f);    // an earlier step's: a stray
    rig.Send(kResult, 1, step, 1, 0, float(step));  // the result of chunk 0
    rig.Send(kResult, 1, step, 1, 0, 77.0f);        // a duplicate: a stray
    rig.Send(kResult, 1, step, 1, 1, float(step) + 0.5f);
    run.join();
    ASSERT_TRUE(report.ok()) << report.status();
    for (uint64_t k = 0; k < kCols; ++k) {
      ASSERT_EQ(grad[k], float(step)) << "step " << step;
      ASSERT_EQ(grad[kCols + k], float(step) + 0.5f) << "step " << step;
    }
    EXPECT_EQ(rig.engine().inbox().stray_messages(), strays + 2);
    EXPECT_EQ(rig.engine().inbox().DroppedSoFar(),
              absl::StrCat("dropped so far: ", strays + 2, " stray, 0 unauthenticated"));
  }
}

// A worker that gave a step up only because it saw a newer epoch, while the
// servers completed the step in the old one (every other worker got those
// results and went on), completes its retry under the new epoch with the old
// epoch's results; an abort of any chunk of the old attempt forbids that,
// and the retry then waits for results of its own epoch.
TEST(PushPullEngineResults, ARetryCompletesWithTheResultsOfTheEpochItGaveUp) {
  constexpr uint64_t kCols = HandServer::kCols;
  for (const bool old_chunk_aborted : {false, true}) {
    SCOPED_TRACE(old_chunk_aborted ? "an old chunk aborted" : "every old chunk completed");
    HandServer rig;
    ASSERT_NO_FATAL_FAILURE(rig.SetUp());
    std::vector<float> grad(2 * kCols, 0.5f);
    StepPlan plan = rig.Plan(1, 7, 2, grad.data());

    // Epoch 1: pushed, one result in, then this worker sees epoch 2.
    absl::StatusOr<StepReport> first = absl::UnknownError("not run");
    std::thread run([&] { first = rig.engine().Run(plan); });
    ASSERT_TRUE(rig.AwaitPushes(2));
    rig.Send(dataplane::ChunkKind::kResult, 1, 7, 2, 0, 3.0f);
    absl::SleepFor(absl::Milliseconds(50));
    rig.engine().AbortEpochsBefore(2, "the cluster moved to epoch 2");
    run.join();
    ASSERT_FALSE(first.ok());
    EXPECT_EQ(first.status().code(), absl::StatusCode::kAborted) << first.status();
    // The old epoch's last chunk: completed at the server (or aborted).
    rig.Send(old_chunk_aborted ? dataplane::ChunkKind::kAbort : dataplane::ChunkKind::kResult, 1, 7,
             2, 1, 4.0f);

    // The retry under epoch 2 gets no result of its own epoch.
    plan.epoch = 2;
    plan.result_timeout = absl::Seconds(old_chunk_aborted ? 1 : 10);
    absl::StatusOr<StepReport> retry = rig.engine().Run(plan);
    EXPECT_TRUE(rig.AwaitPushes(4));  // the retry pushed again
    if (old_chunk_aborted) {
      ASSERT_FALSE(retry.ok());
      EXPECT_EQ(retry.status().code(), absl::StatusCode::kDeadlineExceeded) << retry.status();
      EXPECT_EQ(rig.engine().inbox().earlier_epoch_completions(), 0u);
      continue;
    }
    ASSERT_TRUE(retry.ok()) << retry.status();
    EXPECT_EQ(rig.engine().inbox().earlier_epoch_completions(), 1u);
    for (uint64_t k = 0; k < kCols; ++k) {
      ASSERT_EQ(grad[k], 3.0f) << k;
      ASSERT_EQ(grad[kCols + k], 4.0f) << k;
    }
  }
}

// Two epochs a millisecond apart (a member admitted, then evicted at once):
// a step planned from the first state, whose newer epoch this worker saw
// before the step opened, ends at once instead of waiting out its timeout
// for results the servers, already in the newer epoch, never send; its
// retry under the newer epoch runs. (Found in a 30-minute soak: three
// workers waited a minute for one such step.)
TEST(PushPullEngineResults, AStepOfAnEpochAlreadyReplacedEndsAtOnce) {
  constexpr uint64_t kCols = HandServer::kCols;
  HandServer rig;
  ASSERT_NO_FATAL_FAILURE(rig.SetUp());
  std::vector<float> grad(2 * kCols, 0.5f);
  StepPlan plan = rig.Plan(1, 7, 1, grad.data());
  plan.result_timeout = absl::Seconds(30);
  rig.engine().AbortEpochsBefore(2, "the cluster moved to epoch 2");
  const absl::Time start = absl::Now();
  absl::StatusOr<StepReport> stale = rig.engine().Run(plan);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted) << stale.status();
  EXPECT_NE(stale.status().message().find("step 7 of epoch 1: the cluster moved to epoch 2"),
            std::string::npos)
      << stale.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(rig.engine().inbox().pushed(), false) << "nothing pushed under the replaced epoch";

  plan.epoch = 2;
  plan.result_timeout = absl::Seconds(10);
  absl::StatusOr<StepReport> retry = absl::UnknownError("not run");
  std::thread run([&] { retry = rig.engine().Run(plan); });
  ASSERT_TRUE(rig.AwaitPushes(2));
  rig.Send(dataplane::ChunkKind::kResult, 2, 7, 1, 0, 3.0f);
  rig.Send(dataplane::ChunkKind::kResult, 2, 7, 1, 1, 4.0f);
  run.join();
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(grad[0], 3.0f);
  EXPECT_EQ(grad[kCols], 4.0f);
}

// A step opened with Begin and fed with Add in different batches and orders
// on every worker (one tensor at a time, reversed, all at once, or the
// basis tensor last), with results arriving meanwhile, ends with Run's bits
// (LocalAverage) on every worker; Cancel ends an open step without writing,
// and the next step runs.
TEST_P(PushPullEngineTest, IncrementalAddsInAnyOrderGiveRunsBits) {
  SetEpoch(1, kWorld);
  const uint64_t step = 6;
  std::vector<std::vector<std::vector<float>>> buffers(kWorld);
  std::vector<std::vector<std::vector<TensorStep>>> batches(kWorld);
  std::vector<StepPlan> headers;
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, step));
    StepPlan plan = Plan(1, step, r, kWorld, buffers[r]);
    std::vector<TensorStep> tensors = std::move(plan.tensors);
    plan.tensors.clear();
    headers.push_back(plan);
    switch (r) {
      case 0:
        for (const TensorStep& t : tensors) batches[r].push_back({t});
        break;
      case 1:
        for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) batches[r].push_back({*it});
        break;
      case 2:
        batches[r].push_back(tensors);
        break;
      default:
        batches[r].push_back({tensors[2], tensors[1]});
        batches[r].push_back({tensors[0]});
    }
  }
  std::vector<absl::StatusOr<StepReport>> reports(kWorld, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      if (auto s = rig_.engines[r]->Begin(headers[r]); !s.ok()) {
        reports[r] = s;
        return;
      }
      for (const auto& batch : batches[r]) {
        if (auto s = rig_.engines[r]->Add(batch); !s.ok()) {
          reports[r] = s;
          return;
        }
      }
      reports[r] = rig_.engines[r]->Finish();
    });
  }
  for (auto& th : threads) th.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_GT(reports[r]->bytes_pushed, 0u);
    EXPECT_FALSE(rig_.engines[r]->open());
    for (size_t i = 0; i < kTensors.size(); ++i) {
      EXPECT_EQ(buffers[r][i], LocalAverage(kTensors[i], step, rig_.servers,
                                            kTensors[i].transformed ? basis_.get() : nullptr))
          << "rank " << r << " tensor " << kTensors[i].id;
    }
  }

  // Misuse is refused; Cancel writes nothing.
  EXPECT_EQ(rig_.engines[0]->Add({}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rig_.engines[0]->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> before = Gradient(kTensors[1], 0, step + 1);
  std::vector<float> data = before;
  StepPlan header = headers[0];
  header.step = step + 1;
  ASSERT_TRUE(rig_.engines[0]->Begin(header).ok());
  EXPECT_EQ(rig_.engines[0]->Begin(header).code(), absl::StatusCode::kFailedPrecondition);
  TensorStep one{.tensor_id = kTensors[1].id,
                 .rows = kTensors[1].rows,
                 .cols = kTensors[1].cols,
                 .data = data.data(),
                 .chunks = Routes(kTensors[1], rig_.servers)};
  ASSERT_TRUE(rig_.engines[0]->Add({one}).ok());
  EXPECT_EQ(rig_.engines[0]->Add({one}).code(), absl::StatusCode::kInvalidArgument);  // ends it
  EXPECT_FALSE(rig_.engines[0]->open());
  EXPECT_EQ(data, before);
  ASSERT_TRUE(rig_.engines[0]->Begin(header).ok());
  rig_.engines[0]->Cancel();
  EXPECT_FALSE(rig_.engines[0]->open());
  EXPECT_EQ(data, before);

  // The next step runs (on every worker, after the abandoned ones).
  const uint64_t next = step + 2;
  threads.clear();
  for (uint32_t r = 0; r < kWorld; ++r) {
    buffers[r].clear();
    for (const Tensor& t : kTensors) buffers[r].push_back(Gradient(t, r, next));
    threads.emplace_back(
        [&, r] { reports[r] = rig_.engines[r]->Run(Plan(1, next, r, kWorld, buffers[r])); });
  }
  for (auto& th : threads) th.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_EQ(buffers[r][1], LocalAverage(kTensors[1], next, rig_.servers, nullptr));
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PushPullEngineTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ucx" : "inproc"; });

}  // namespace
}  // namespace gift::worker
