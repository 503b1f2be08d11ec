// The push-pull engine's device stage (worker/cuda/device_codec_stage.h)
// against the host stage (worker/engine/tensor_codec_stage.h):
//
//   - stage by stage: the same gradient encoded by both, chunk by chunk into
//     send arenas (bit-identical payloads for direct codecs; for a GIFT
//     basis, the device transform agrees within transform_cuda_test's
//     tolerance, so the payloads decode to within it plus the rare code at a
//     rounding boundary), and the same result chunks decoded by both in a
//     shuffled order, inverse-transformed and written back (bit-identical
//     for direct codecs, within 1e-5 relative for GIFT);
//   - end to end: two push-pull engines on UCX over loopback against two
//     real aggregator shards, rank 0's gradients in device memory (the
//     device stage), rank 1's in host memory: both ranks get the same
//     average, bit for bit for direct codecs and equal to the local
//     re-computation, within 1e-5 for GIFT (the inverse ran on the device
//     for one and on the CPU for the other);
//   - the pipelining: steps on one arena (chunks encoded ahead of their
//     calls, results through the staging ring) against the host stage,
//     bit for bit for direct codecs; non-finite input failing exactly the
//     chunk that holds it while later chunks were encoded ahead; the
//     stream's priority;
//   - error feedback asked for a device tensor is refused, counted.
//
// Built twice (tests/worker/CMakeLists.txt): device_codec_stage_test (on a
// GPU; skips without one, saying so) and device_codec_stage_emulated_test
// (over the host emulation of tests/kernels/, everywhere; device memory is
// the emulated cudaMalloc's).
#include "worker/cuda/device_codec_stage.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_rng_key.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transform/identity_transform.h"
#include "common/transform/rotated_transform.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/codec/codec_cuda.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/transform/test_util.h"
#include "tests/worker/engine_rig.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/push_pull_engine.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {
namespace {

constexpr uint64_t kRows = 64, kCols = 96;
constexpr double kTransformTolerance = 1e-5;  // transform_cuda_test.cc's, kFp32

#define SKIP_WITHOUT_DEVICE() \
  if (!kernels::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: nothing to run on"

std::shared_ptr<const transform::GradientTransform> Basis() {
  const auto factors = transform::testing::SampleFactors(kRows, kCols, 5, 3);
  return std::make_shared<transform::TensorBasisTransform>(
      transform::TensorBasis::Create(
          {.tensor_id = 1, .version = 1, .d_out = kRows, .d_in = kCols, .config = {}},
          transform::SideBasis::FromFactor(factors.out, 16).value(),
          transform::SideBasis::FromFactor(factors.in, 16).value())
          .value());
}

std::shared_ptr<const transform::GradientTransform> Identity() {
  return std::make_shared<transform::IdentityTransform>(
      transform::IdentityTransform::Create(kRows, kCols).value());
}

// `t` followed by the rows' rotation in blocks of `block` (none for 0).
std::shared_ptr<const transform::GradientTransform> Rotated(
    std::shared_ptr<const transform::GradientTransform> t, int64_t block) {
  if (block == 0) return t;
  return transform::RotatedTransform::Create(std::move(t), block).value();
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Device memory holding a copy of `host` (freed with the object).
class DeviceTensor {
 public:
  explicit DeviceTensor(const std::vector<float>& host) : size_(host.size()) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, sizeof(float) * size_), cudaSuccess);
    data_ = static_cast<float*>(p);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), sizeof(float) * size_, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceTensor() { cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  float* data() { return data_; }
  std::vector<float> Read() const {
    std::vector<float> host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, sizeof(float) * size_, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t size_;
  float* data_ = nullptr;
};

// A send arena laid out for `chunks` in `spec`, as the engine's.
struct Arena {
  std::vector<uint8_t> bytes;
  std::vector<size_t> starts;  // chunk k's payload: [starts[k], starts[k + 1])
};

Arena MakeArena(const codec::CodecSpec& spec, const std::vector<ChunkRoute>& chunks) {
  Arena arena;
  size_t bytes = 0;
  for (const ChunkRoute& c : chunks) {
    const auto shape = dataplane::ChunkShapeOf(kRows * kCols, kCols, c.offset, c.num_elements);
    const uint64_t dims[] = {shape->rows, shape->cols};
    arena.starts.push_back(bytes);
    bytes += codec::PayloadSizeFor(spec, dims).value();
  }
  arena.starts.push_back(bytes);
  arena.bytes.resize(bytes);
  return arena;
}

// One step of `stage` by hand, as the engine runs it: the gradient encoded
// chunk by chunk into `arena` (attached), with the keys of `step` and
// `rank`, then `results` (host payloads, one per chunk) decoded in `order`,
// inverse-transformed and written into `out`. Stops at the first error.
struct StageRun {
  std::vector<std::vector<uint8_t>> payloads;  // what each chunk sent
  absl::Status status;
};

StageRun RunStep(TensorCodecStage& stage, Arena& arena, const float* gradient,
                 const codec::CodecSpec& spec, const std::vector<ChunkRoute>& chunks,
                 const std::vector<std::vector<uint8_t>>& results, const std::vector<size_t>& order,
                 float* out, uint64_t step = 7, uint32_t rank = 0) {
  StageRun run;
  auto check = [&run](absl::Status s) {
    if (run.status.ok()) run.status = s;
    return s.ok();
  };
  if (!check(stage.Prepare(gradient).status())) return run;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const auto shape =
        dataplane::ChunkShapeOf(kRows * kCols, kCols, chunks[k].offset, chunks[k].num_elements);
    const uint64_t dims[] = {shape->rows, shape->cols};
    const absl::Span<uint8_t> send =
        absl::MakeSpan(arena.bytes.data() + arena.starts[k], arena.starts[k + 1] - arena.starts[k]);
    auto view = codec::StartPayload(spec, dims, send);
    if (!check(view.status())) return run;
    if (!check(stage.EncodeChunk(chunks[k].offset, *view,
                                 dataplane::ChunkRngKey(1, chunks[k].index, step, rank)))) {
      return run;
    }
    codec::FinishPayload(send);
    run.payloads.emplace_back(send.begin(), send.end());
  }
  for (size_t k : order) {
    auto parsed = codec::ParsePayload(results[k]);
    if (!check(parsed.status())) return run;
    if (!check(stage.DecodeChunk(parsed->view, chunks[k].offset))) return run;
  }
  if (!check(stage.FinishDecode())) return run;
  check(stage.WriteResult(out));
  stage.CommitResidual();
  return run;
}

// RunStep into a new arena.
StageRun RunStage(TensorCodecStage& stage, const float* gradient, const codec::CodecSpec& spec,
                  const std::vector<ChunkRoute>& chunks,
                  const std::vector<std::vector<uint8_t>>& results,
                  const std::vector<size_t>& order, float* out) {
  Arena arena = MakeArena(spec, chunks);
  if (absl::Status s = stage.AttachSendBuffer(absl::MakeSpan(arena.bytes)); !s.ok()) {
    return {{}, s};
  }
  return RunStep(stage, arena, gradient, spec, chunks, results, order, out);
}

// Results: another gradient's chunks in the pull codec, as servers send.
std::vector<std::vector<uint8_t>> ResultPayloads(const codec::CodecSpec& pull,
                                                 const std::vector<ChunkRoute>& chunks,
                                                 const std::vector<float>& sum) {
  std::vector<std::vector<uint8_t>> results;
  for (const ChunkRoute& c : chunks) {
    const auto shape = dataplane::ChunkShapeOf(kRows * kCols, kCols, c.offset, c.num_elements);
    auto encoded = codec::EncodedTensor::Create(pull, shape->rows, shape->cols).value();
    EXPECT_TRUE(codec::Encode(sum.data() + c.offset, encoded.mutable_view(), {}).ok());
    const uint64_t dims[] = {shape->rows, shape->cols};
    results.push_back(codec::SerializePayload(encoded.view(), dims).value());
  }
  return results;
}

std::vector<float> DecodePayloads(const std::vector<std::vector<uint8_t>>& payloads,
                                  const std::vector<ChunkRoute>& chunks) {
  std::vector<float> out(kRows * kCols);
  for (size_t k = 0; k < chunks.size(); ++k) {
    auto parsed = codec::ParsePayload(payloads[k]);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) {
      EXPECT_TRUE(codec::Decode(parsed->view, out.data() + chunks[k].offset).ok());
    }
  }
  return out;
}

struct StageCase {
  std::string push;
  std::string pull;  // the results' codec
  bool gift;
  uint64_t rows_per_chunk;
  int64_t rotation_block = 0;  // > 0: the transform rotated (RotatedTransform)
};

void PrintTo(const StageCase& c, std::ostream* os) {
  *os << c.push << " -> " << c.pull << (c.gift ? ", GIFT" : ", direct") << ", chunks of "
      << c.rows_per_chunk << " rows";
  if (c.rotation_block > 0) *os << ", rotated in blocks of " << c.rotation_block;
}

// What a case's tests share: its codecs, chunks, gradient and transform,
// and the results servers send (another gradient's chunks in the pull codec).
struct StageSetup {
  explicit StageSetup(const StageCase& p)
      : push(codec::ParseCodecSpec(p.push).value()),
        pull(codec::ParseCodecSpec(p.pull).value()),
        tensor{1, kRows, kCols, p.rows_per_chunk, p.gift},
        chunks(testing::Routes(tensor, {"s"})),
        g(testing::Gradient(tensor, 0, 7)),
        transform(Rotated(p.gift ? Basis() : Identity(), p.rotation_block)),
        results(ResultPayloads(pull, chunks, testing::Gradient(tensor, 1, 8))) {}

  codec::CodecSpec push, pull;
  testing::Tensor tensor;
  std::vector<ChunkRoute> chunks;
  std::vector<float> g;
  std::shared_ptr<const transform::GradientTransform> transform;
  std::vector<std::vector<uint8_t>> results;
};

class DeviceStageTest : public ::testing::TestWithParam<StageCase> {};

TEST_P(DeviceStageTest, MatchesTheHostStageInAnyArrivalOrder) {
  SKIP_WITHOUT_DEVICE();
  const StageCase& p = GetParam();
  const StageSetup setup(p);
  const auto& [push, pull, tensor, chunks, g, transform, results] = setup;
  ASSERT_GE(chunks.size(), 3u);

  auto host = HostCodecStage::Create(transform, {.spec = push}).value();
  std::vector<size_t> in_order(chunks.size());
  for (size_t k = 0; k < in_order.size(); ++k) in_order[k] = k;
  std::vector<float> host_out(g.size());
  const StageRun host_run =
      RunStage(*host, g.data(), push, chunks, results, in_order, host_out.data());
  ASSERT_TRUE(host_run.status.ok()) << host_run.status;

  auto device = DeviceCodecStage::Create(transform, {.spec = push});
  ASSERT_TRUE(device.ok()) << device.status();
  DeviceTensor gradient(g);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3; ++trial) {  // the same stage, step after step
    std::vector<size_t> order = in_order;
    if (trial == 1) std::reverse(order.begin(), order.end());
    if (trial == 2) std::shuffle(order.begin(), order.end(), rng);
    DeviceTensor out(std::vector<float>(g.size(), -1.0f));
    const StageRun run =
        RunStage(**device, gradient.data(), push, chunks, results, order, out.data());
    ASSERT_TRUE(run.status.ok()) << run.status;
    ASSERT_EQ(run.payloads.size(), host_run.payloads.size());
    const std::vector<float> device_out = out.Read();
    EXPECT_EQ(gradient.Read(), g) << "the gradient is read only";
    if (!p.gift) {
      for (size_t k = 0; k < chunks.size(); ++k) {
        EXPECT_EQ(run.payloads[k], host_run.payloads[k]) << "chunk " << k << ", trial " << trial;
      }
      EXPECT_EQ(device_out, host_out) << "trial " << trial;
    } else {
      // The device forward agrees within the transform tolerance, so codes
      // differ only where a value sits that close to a rounding boundary.
      EXPECT_LT(RelativeError(DecodePayloads(run.payloads, chunks),
                              DecodePayloads(host_run.payloads, chunks)),
                1e-2);
      EXPECT_LT(RelativeError(device_out, host_out), kTransformTolerance) << "trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, DeviceStageTest,
                         ::testing::Values(StageCase{"e4m3/block32", "bf16", false, 16},
                                           StageCase{"nvfp4", "e4m3/block32", false, 8},
                                           StageCase{"bf16", "fp32", false, 10},
                                           StageCase{"e4m3/block32/sr", "e4m3/block128", false, 16},
                                           StageCase{"e4m3/block32", "bf16", true, 16},
                                           StageCase{"nvfp4", "fp32", true, 10},
                                           // The rotation (bit for bit when direct).
                                           StageCase{"nvfp4", "e4m3/block32", false, 8, 32},
                                           StageCase{"e4m3/block32", "bf16", false, 16, 16},
                                           StageCase{"nvfp4", "fp32", true, 10, 16}));

// The engine's way: one arena for every step, so that from the second step
// on chunks are encoded ahead of their calls (EncodeSchedule), and results
// go through the page-locked staging ring (here as small as 1). Step after
// step, with each step's keys, and a rank change in the last step (every
// prediction of it wrong): the payloads and results are the host stage's,
// bit for bit for direct codecs.
struct PipelineCase {
  size_t encode_ahead;
  size_t result_staging;
};

class DeviceStagePipelineTest
    : public ::testing::TestWithParam<std::tuple<StageCase, PipelineCase>> {};

TEST_P(DeviceStagePipelineTest, StepsOnOneArenaMatchTheHostStage) {
  SKIP_WITHOUT_DEVICE();
  const auto& [p, pipe] = GetParam();
  const StageSetup setup(p);
  const auto& [push, pull, tensor, chunks, g, transform, results] = setup;
  ASSERT_GE(chunks.size(), 3u);
  std::vector<size_t> order(chunks.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;

  auto host = HostCodecStage::Create(transform, {.spec = push}).value();
  auto device = DeviceCodecStage::Create(
      transform, {.spec = push},
      {.encode_ahead = pipe.encode_ahead, .result_staging = pipe.result_staging});
  ASSERT_TRUE(device.ok()) << device.status();
  Arena host_arena = MakeArena(push, chunks);
  Arena device_arena = MakeArena(push, chunks);
  ASSERT_TRUE(host->AttachSendBuffer(absl::MakeSpan(host_arena.bytes)).ok());
  ASSERT_TRUE((*device)->AttachSendBuffer(absl::MakeSpan(device_arena.bytes)).ok());
  DeviceTensor gradient(g);
  constexpr uint64_t kSteps = 4;
  for (uint64_t step = 1; step <= kSteps; ++step) {
    const uint32_t rank = step == kSteps ? 1 : 0;
    std::vector<float> host_out(g.size());
    const StageRun want = RunStep(*host, host_arena, g.data(), push, chunks, results, order,
                                  host_out.data(), step, rank);
    ASSERT_TRUE(want.status.ok()) << want.status;
    DeviceTensor out(std::vector<float>(g.size(), -1.0f));
    const StageRun got = RunStep(**device, device_arena, gradient.data(), push, chunks, results,
                                 order, out.data(), step, rank);
    ASSERT_TRUE(got.status.ok()) << got.status << ", step " << step;
    ASSERT_EQ(got.payloads.size(), want.payloads.size());
    if (!p.gift) {
      for (size_t k = 0; k < chunks.size(); ++k) {
        EXPECT_EQ(got.payloads[k], want.payloads[k]) << "chunk " << k << ", step " << step;
      }
      EXPECT_EQ(out.Read(), host_out) << "step " << step;
    } else {
      EXPECT_LT(RelativeError(DecodePayloads(got.payloads, chunks),
                              DecodePayloads(want.payloads, chunks)),
                1e-2);
      EXPECT_LT(RelativeError(out.Read(), host_out), kTransformTolerance) << "step " << step;
    }
  }
  // Steps 2 and 3 had every chunk but the first encoded ahead; step 4's
  // predictions (rank 0) were all wrong.
  const uint64_t served = pipe.encode_ahead == 0 ? 0 : 2 * (chunks.size() - 1);
  EXPECT_EQ((*device)->encodes_ahead_used(), served);
  EXPECT_GE((*device)->encodes_ahead(), served + (pipe.encode_ahead == 0 ? 0 : 1));
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, DeviceStagePipelineTest,
    ::testing::Combine(::testing::Values(StageCase{"e4m3/block32/sr", "bf16", false, 8},
                                         StageCase{"nvfp4", "e4m3/block32", false, 10},
                                         StageCase{"e4m3/block32", "bf16", true, 16}),
                       ::testing::Values(PipelineCase{0, 1}, PipelineCase{1, 1},
                                         PipelineCase{3, 4})));

// Non-finite input fails the call of the chunk that holds it, with the
// error of EncodeCuda, while chunks after it were encoded ahead (their
// checks set too, or not): the chunks before it sent the host stage's
// bytes, and the next step, finite again, is the host stage's bit for bit.
TEST(DeviceStageNonFiniteTest, FailsTheChunkThatHoldsItAndNothingElse) {
  SKIP_WITHOUT_DEVICE();
  const codec::CodecSpec push = codec::ParseCodecSpec("e4m3/block32").value();
  const codec::CodecSpec pull = codec::ParseCodecSpec("bf16").value();
  const testing::Tensor tensor{1, kRows, kCols, 8, false};
  const std::vector<ChunkRoute> chunks = testing::Routes(tensor, {"s"});
  ASSERT_GE(chunks.size(), 4u);
  const std::vector<float> g = testing::Gradient(tensor, 0, 7);
  const auto results = ResultPayloads(pull, chunks, testing::Gradient(tensor, 1, 8));
  std::vector<size_t> order(chunks.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;

  auto host = HostCodecStage::Create(Identity(), {.spec = push}).value();
  auto device = DeviceCodecStage::Create(Identity(), {.spec = push}, {.encode_ahead = 2});
  ASSERT_TRUE(device.ok()) << device.status();
  Arena host_arena = MakeArena(push, chunks);
  Arena device_arena = MakeArena(push, chunks);
  ASSERT_TRUE(host->AttachSendBuffer(absl::MakeSpan(host_arena.bytes)).ok());
  ASSERT_TRUE((*device)->AttachSendBuffer(absl::MakeSpan(device_arena.bytes)).ok());
  uint64_t step = 1;
  auto clean_step = [&] {
    DeviceTensor gradient(g);
    DeviceTensor out(std::vector<float>(g.size(), -1.0f));
    std::vector<float> host_out(g.size());
    const StageRun want =
        RunStep(*host, host_arena, g.data(), push, chunks, results, order, host_out.data(), step);
    const StageRun got = RunStep(**device, device_arena, gradient.data(), push, chunks, results,
                                 order, out.data(), step);
    ++step;
    ASSERT_TRUE(got.status.ok()) << got.status;
    EXPECT_EQ(got.payloads, want.payloads) << "step " << step - 1;
    EXPECT_EQ(out.Read(), host_out) << "step " << step - 1;
  };
  clean_step();  // the arena's first step: nothing encoded ahead yet
  const size_t last = chunks.size() - 1;
  for (const size_t bad : {size_t{0}, size_t{1}, size_t{2}, last}) {
    for (const float value :
         {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = g;
      x[chunks[bad].offset + chunks[bad].num_elements / 2] = value;
      DeviceTensor gradient(x);
      DeviceTensor out(std::vector<float>(g.size(), -1.0f));
      std::vector<float> host_out(g.size());
      const StageRun want =
          RunStep(*host, host_arena, x.data(), push, chunks, results, order, host_out.data(), step);
      const uint64_t used = (*device)->encodes_ahead_used();
      const StageRun got = RunStep(**device, device_arena, gradient.data(), push, chunks, results,
                                   order, out.data(), step);
      ++step;
      EXPECT_EQ(want.status.code(), absl::StatusCode::kInvalidArgument) << want.status;
      EXPECT_EQ(got.status.code(), absl::StatusCode::kInvalidArgument) << got.status;
      EXPECT_THAT(std::string(got.status.message()), ::testing::HasSubstr("NaN or Inf"));
      ASSERT_EQ(got.payloads.size(), bad) << "the chunk holding it fails, none before";
      EXPECT_EQ(got.payloads, want.payloads) << "bad chunk " << bad;
      // Chunks before `bad` (and `bad` itself, past chunk 0) were served by
      // encodes ahead, so the right check was read out of several in flight.
      EXPECT_EQ((*device)->encodes_ahead_used() - used, bad) << "bad chunk " << bad;
      EXPECT_EQ(out.Read(), std::vector<float>(g.size(), -1.0f)) << "nothing written";
      clean_step();
    }
  }
}

TEST(DeviceStagePriorityTest, TheLeastPriorityByDefaultOrTheOneAskedFor) {
  SKIP_WITHOUT_DEVICE();
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  const codec::CodecSpec push = codec::ParseCodecSpec("e4m3/block32").value();
  auto by_default = DeviceCodecStage::Create(Identity(), {.spec = push});
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  int priority = 1234;
  ASSERT_EQ(cudaStreamGetPriority((*by_default)->stream(), &priority), cudaSuccess);
  EXPECT_EQ(priority, least);
  auto asked = DeviceCodecStage::Create(Identity(), {.spec = push}, {.stream_priority = greatest});
  ASSERT_TRUE(asked.ok()) << asked.status();
  ASSERT_EQ(cudaStreamGetPriority((*asked)->stream(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  for (const int bad : {least + 1, greatest - 1}) {
    const auto refused =
        DeviceCodecStage::Create(Identity(), {.spec = push}, {.stream_priority = bad});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(
      DeviceCodecStage::Create(Identity(), {.spec = push}, {.result_staging = 0}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(DeviceStageRefusalTest, ErrorFeedbackIsRefusedAndCounted) {
  SKIP_WITHOUT_DEVICE();
  const uint64_t before = DeviceCodecStage::error_feedback_refusals();
  auto stage = DeviceCodecStage::Create(
      Identity(), {.spec = codec::ParseCodecSpec("e4m3/block32").value(), .error_feedback = true});
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_FALSE((*stage)->error_feedback());
  EXPECT_EQ((*stage)->error_feedback_bytes(), 0u);
  EXPECT_EQ(DeviceCodecStage::error_feedback_refusals(), before + 1);
}

TEST(DeviceStageRefusalTest, WithoutADeviceCreateIsRefused) {
  if (kernels::CudaDeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  const auto stage =
      DeviceCodecStage::Create(Identity(), {.spec = codec::ParseCodecSpec("e4m3/block32").value()});
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kFailedPrecondition) << stage.status();
}

TEST(DeviceStageRefusalTest, ABadSpecIsRefused) {
  codec::CodecSpec bad = codec::ParseCodecSpec("e4m3/block32").value();
  bad.block_size = 7;
  EXPECT_EQ(DeviceCodecStage::Create(Identity(), {.spec = bad}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceStageRefusalTest, AnEngineWithoutDeviceStagesRefusesADeviceTensor) {
  testing::EngineRig rig;
  ASSERT_TRUE(rig.Start({.servers = 1,
                         .workers = 1,
                         .pull = codec::ParseCodecSpec("bf16").value(),
                         .ucx = true,
                         .timeout = absl::Seconds(5)})
                  .ok());
  auto* engine = &rig.engines[0];
  std::vector<float> g(kRows * kCols, 1.0f);
  StepPlan plan{.epoch = 1, .step = 1, .rank = 0, .world_size = 1};
  plan.tensors.push_back({.tensor_id = 1,
                          .rows = kRows,
                          .cols = kCols,
                          .data = g.data(),
                          .device = true,
                          .chunks = testing::Routes({1, kRows, kCols, 16, false}, rig.servers),
                          .push_spec = codec::ParseCodecSpec("e4m3/block32").value()});
  const auto report = (*engine)->Run(plan);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kUnimplemented) << report.status();
}

// Two engines on UCX over loopback and two aggregator shards: rank 0's
// tensors on the device, rank 1's on the host.
TEST(DeviceEngineTest, DeviceAndHostRanksGetTheSameAverage) {
  SKIP_WITHOUT_DEVICE();
  constexpr uint32_t kWorld = 2;
  constexpr int kServers = 2;
  const codec::CodecSpec pull = codec::ParseCodecSpec("bf16").value();
  testing::EngineRig rig;
  ASSERT_TRUE(rig.Start({.servers = kServers,
                         .workers = kWorld,
                         .pull = pull,
                         .ucx = true,
                         .timeout = absl::Seconds(30),
                         .device_stages = [](uint32_t r) -> DeviceStageFactory {
                           return r == 0 ? DeviceCodecStage::Factory() : nullptr;
                         }})
                  .ok());
  const std::vector<std::string>& servers = rig.servers;
  const std::vector<testing::Tensor> tensors = {
      {1, kRows, kCols, 16, true},  // GIFT basis
      {2, 33, 50, 10, false},       // direct, the last chunk of 3 rows
      {3, 1, 1000, 0, false},       // direct, one row in 512 + 488
  };
  const auto basis = Basis();
  const codec::CodecSpec push = codec::ParseCodecSpec("e4m3/block32").value();
  ASSERT_TRUE(rig.SetEpoch(1, rig.OnServers(tensors)).ok());

  for (uint64_t step = 1; step <= 3; ++step) {
    std::vector<std::vector<std::vector<float>>> host(kWorld);  // [rank][tensor]
    std::vector<std::unique_ptr<DeviceTensor>> device;          // rank 0's
    std::vector<StepPlan> plans(kWorld);
    for (uint32_t r = 0; r < kWorld; ++r) {
      plans[r] = {.epoch = 1, .step = step, .rank = r, .world_size = kWorld};
      for (const testing::Tensor& t : tensors) {
        host[r].push_back(testing::Gradient(t, r, step));
        float* data = host[r].back().data();
        if (r == 0) {
          device.push_back(std::make_unique<DeviceTensor>(host[r].back()));
          data = device.back()->data();
        }
        plans[r].tensors.push_back({.tensor_id = t.id,
                                    .rows = t.rows,
                                    .cols = t.cols,
                                    .data = data,
                                    .device = r == 0,
                                    .transform = t.transformed ? basis : nullptr,
                                    .basis_version = t.transformed ? 1u : 0u,
                                    .chunks = testing::Routes(t, servers),
                                    .push_spec = push});
      }
    }
    const auto done = rig.Run(plans);
    for (uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(done[r].ok()) << "rank " << r << done[r].status();
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::vector<float> on_device = device[i]->Read();
      const std::vector<float>& on_host = host[1][i];
      if (!tensors[i].transformed) {
        EXPECT_EQ(on_device, on_host) << "tensor " << tensors[i].id << ", step " << step;
        EXPECT_EQ(on_host,
                  testing::LocalAverage(tensors[i], step, kWorld, servers, push, pull, nullptr))
            << "tensor " << tensors[i].id << ", step " << step;
      } else {
        EXPECT_LT(RelativeError(on_device, on_host), kTransformTolerance) << "step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace gift::worker
