// Error feedback on the worker's data path: two push-pull engines against an
// in-process aggregator shard (FP32 pull, so the only rounding is the
// workers' push), compared with reference encoder pipelines that run the same
// chunks, keys and basis switches by hand.
//
//   - a basis switch between steps: the engine remaps the residual at the
//     first step under the new basis (after the last step under the old one
//     was decoded), and the accumulated average stays exact against the dense
//     sum of the gradients: sum_t avg_t = exact sum - mean_r T^{-1}(E_r);
//   - the residual is kept across an epoch change that keeps the workers (even
//     when the chunking changes) and cleared when the worker set changes;
//   - the engine reports the residuals' memory.
#include <cmath>
#include <iostream>
#include <memory>
#include <vector>

#include "common/base/relative_error.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_rng_key.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transform/encoder_pipeline.h"
#include "common/transform/tensor_basis_transform.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"
#include "tests/worker/engine_rig.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker {
namespace {

constexpr uint32_t kWorld = 2;  // FP32 sums of two contributions do not depend on their order
constexpr uint64_t kTensor = 1, kRows = 64, kCols = 96;

const codec::CodecSpec& PushSpec() {
  static const codec::CodecSpec spec = codec::ParseCodecSpec("e4m3/block32").value();
  return spec;
}

std::vector<ChunkRoute> Chunks(uint64_t rows_per_chunk, const std::string& server) {
  return testing::Routes({kTensor, kRows, kCols, rows_per_chunk, true}, {server});
}

std::vector<float> Gradient(uint32_t rank, uint64_t step) {
  return testing::Gradient({kTensor, kRows, kCols, 16, true}, rank, step);
}

std::shared_ptr<const transform::GradientTransform> Basis(uint64_t version, uint32_t seed) {
  const auto factors = transform::testing::SampleFactors(kRows, kCols, 5, seed);
  return std::make_shared<transform::TensorBasisTransform>(
      transform::TensorBasis::Create(
          {.tensor_id = kTensor, .version = version, .d_out = kRows, .d_in = kCols, .config = {}},
          transform::SideBasis::FromFactor(factors.out, 16).value(),
          transform::SideBasis::FromFactor(factors.in, 16).value())
          .value());
}

double Norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// One worker's side done by hand: its encoder pipeline, encoding chunk by
// chunk with the engine's keys.
class ReferenceWorker {
 public:
  ReferenceWorker(uint32_t rank, std::shared_ptr<const transform::GradientTransform> t)
      : rank_(rank),
        pipeline_(transform::EncoderPipeline::Create(std::move(t),
                                                     {.spec = PushSpec(), .error_feedback = true})
                      .value()) {}

  // The decoded contribution of this worker's `g` at `step`, in transformed
  // coordinates (what the servers add up).
  std::vector<float> Push(const std::vector<float>& g, uint64_t step,
                          const std::vector<ChunkRoute>& chunks) {
    std::vector<float> work(g.size()), decoded(g.size());
    const float* x = pipeline_.Prepare(g.data(), work.data()).value();
    for (const ChunkRoute& c : chunks) {
      const auto shape = dataplane::ChunkShapeOf(g.size(), kCols, c.offset, c.num_elements).value();
      auto encoded = codec::EncodedTensor::Create(PushSpec(), shape.rows, shape.cols).value();
      EXPECT_TRUE(pipeline_
                      .EncodeChunk(x, c.offset, encoded.mutable_view(),
                                   dataplane::ChunkRngKey(kTensor, c.index, step, rank_))
                      .ok());
      EXPECT_TRUE(codec::Decode(encoded.view(), decoded.data() + c.offset).ok());
    }
    pipeline_.CommitResidual();
    return decoded;
  }

  transform::EncoderPipeline& pipeline() { return pipeline_; }

 private:
  uint32_t rank_;
  transform::EncoderPipeline pipeline_;
};

class ErrorFeedbackEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(rig_.Start({.servers = 1, .workers = kWorld}).ok()); }

  void SetEpoch(uint64_t epoch, const std::vector<ChunkRoute>& chunks) {
    ASSERT_TRUE(rig_.SetEpoch(epoch, {{{kTensor, kRows, kCols, 0, true}, chunks}}).ok());
  }

  // Runs one step on both engines (gradients Gradient(r, step)); returns
  // rank 0's result (every rank gets the same average).
  std::vector<float> Step(uint64_t epoch, uint64_t step, uint64_t worker_set,
                          const std::shared_ptr<const transform::GradientTransform>& basis,
                          uint64_t basis_version, const std::vector<ChunkRoute>& chunks) {
    std::vector<std::vector<float>> buffers;
    std::vector<StepPlan> plans;
    for (uint32_t r = 0; r < kWorld; ++r) buffers.push_back(Gradient(r, step));
    for (uint32_t r = 0; r < kWorld; ++r) {
      plans.push_back({.epoch = epoch,
                       .step = step,
                       .rank = r,
                       .world_size = kWorld,
                       .worker_set = worker_set,
                       .tensors = {{.tensor_id = kTensor,
                                    .rows = kRows,
                                    .cols = kCols,
                                    .data = buffers[r].data(),
                                    .transform = basis,
                                    .basis_version = basis_version,
                                    .chunks = chunks,
                                    .push_spec = PushSpec(),
                                    .error_feedback = true}}});
    }
    const auto reports = rig_.Run(plans);
    for (uint32_t r = 0; r < kWorld; ++r) EXPECT_TRUE(reports[r].ok()) << reports[r].status();
    EXPECT_EQ(buffers[0], buffers[1]);
    return buffers[0];
  }

  // The reference average of `step`: both reference workers push, the sum
  // times 1/P goes through T^{-1}.
  static std::vector<float> ReferenceStep(std::vector<ReferenceWorker>& workers, uint64_t step,
                                          const std::vector<ChunkRoute>& chunks) {
    std::vector<float> avg(kRows * kCols, 0.0f);
    for (uint32_t r = 0; r < kWorld; ++r) {
      const std::vector<float> d = workers[r].Push(Gradient(r, step), step, chunks);
      for (size_t k = 0; k < avg.size(); ++k) avg[k] += d[k];
    }
    for (float& v : avg) v *= 1.0f / kWorld;
    EXPECT_TRUE(workers[0].pipeline().FinishDecode(avg.data()).ok());
    return avg;
  }

  testing::EngineRig rig_;
};

// The engine's results equal the references' to rounding (the inverse
// transform's summation order); a missed or misplaced remap differs by the
// size of the residual, orders of magnitude more.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  EXPECT_LT(RelativeL2(got, want), 1e-5) << what;
}

TEST_F(ErrorFeedbackEngineTest, BasisSwitchRemapsTheResidualAndTheSumStaysExact) {
  const auto chunks = Chunks(16, rig_.servers[0]);
  SetEpoch(1, chunks);
  const auto old_basis = Basis(1, 3), new_basis = Basis(2, 11);
  std::vector<ReferenceWorker> ref;
  for (uint32_t r = 0; r < kWorld; ++r) ref.emplace_back(r, old_basis);

  constexpr uint64_t kSteps = 12, kSwitchAt = 6;
  std::vector<double> sum(kRows * kCols, 0.0), exact(kRows * kCols, 0.0);
  for (uint64_t step = 0; step < kSteps; ++step) {
    const bool switched = step >= kSwitchAt;
    if (step == kSwitchAt) {
      for (ReferenceWorker& w : ref) ASSERT_TRUE(w.pipeline().SwitchBasis(new_basis).ok());
    }
    const std::vector<float> got =
        Step(1, step, 7, switched ? new_basis : old_basis, switched ? 2 : 1, chunks);
    const std::vector<float> want = ReferenceStep(ref, step, chunks);
    ExpectClose(got, want, "step result");
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += got[k];
    for (uint32_t r = 0; r < kWorld; ++r) {
      const std::vector<float> g = Gradient(r, step);
      for (size_t k = 0; k < g.size(); ++k) exact[k] += static_cast<double>(g[k]) / kWorld;
    }
  }
  // sum_t avg_t + mean_r T_last^{-1}(E_r) = the exact sum of the averages.
  std::vector<double> residual(sum.size(), 0.0), gap(sum.size());
  for (ReferenceWorker& w : ref) {
    std::vector<float> e(w.pipeline().residual().begin(), w.pipeline().residual().end());
    ASSERT_TRUE(new_basis->Inverse(e.data(), kRows, kCols, e.data()).ok());
    for (size_t k = 0; k < e.size(); ++k) residual[k] += static_cast<double>(e[k]) / kWorld;
  }
  for (size_t k = 0; k < gap.size(); ++k) gap[k] = sum[k] + residual[k] - exact[k];
  std::cout << "[ ef       ] " << kSteps << " steps, basis switch at " << kSwitchAt
            << ": |sum - exact| / |exact| " <<
      [&] {
        std::vector<double> d(sum.size());
        for (size_t k = 0; k < d.size(); ++k) d[k] = sum[k] - exact[k];
        return Norm(d) / Norm(exact);
      }() << ", |sum + residual - exact| / |residual| "
            << Norm(gap) / Norm(residual) << "\n";
  EXPECT_GT(Norm(residual), 1e-4 * Norm(exact));  // there is a residual to account for
  EXPECT_LT(Norm(gap), 1e-3 * Norm(residual));
  EXPECT_EQ(rig_.engines[0]->error_feedback_bytes(), 2 * sizeof(float) * kRows * kCols);
}

TEST_F(ErrorFeedbackEngineTest, ResidualKeptAcrossEpochsOfTheSameWorkersAndResetForNewOnes) {
  const auto basis = Basis(1, 5);
  const auto coarse = Chunks(16, rig_.servers[0]), fine = Chunks(8, rig_.servers[0]);
  std::vector<ReferenceWorker> ref;
  for (uint32_t r = 0; r < kWorld; ++r) ref.emplace_back(r, basis);
  SetEpoch(1, coarse);
  for (uint64_t step = 0; step < 3; ++step) {
    ExpectClose(Step(1, step, 7, basis, 1, coarse), ReferenceStep(ref, step, coarse), "epoch 1");
  }
  // Epoch 2: same workers, the shard map cut finer (a server joined): kept.
  SetEpoch(2, fine);
  for (uint64_t step = 3; step < 5; ++step) {
    ExpectClose(Step(2, step, 7, basis, 1, fine), ReferenceStep(ref, step, fine), "epoch 2");
  }
  // Epoch 3: another worker set (a member left, another took its rank):
  // the residuals start from zero, as a fresh reference does.
  std::vector<ReferenceWorker> fresh;
  for (uint32_t r = 0; r < kWorld; ++r) fresh.emplace_back(r, basis);
  std::vector<ReferenceWorker> kept = std::move(ref);
  SetEpoch(3, fine);
  const std::vector<float> got = Step(3, 5, 8, basis, 1, fine);
  const std::vector<float> want_fresh = ReferenceStep(fresh, 5, fine);
  const std::vector<float> want_kept = ReferenceStep(kept, 5, fine);
  ExpectClose(got, want_fresh, "epoch 3 (new workers)");
  EXPECT_GT(RelativeL2(got, want_kept), 1e-3);  // the kept residual would show
  ExpectClose(Step(3, 6, 8, basis, 1, fine), ReferenceStep(fresh, 6, fine), "epoch 3, next step");
}

}  // namespace
}  // namespace gift::worker
