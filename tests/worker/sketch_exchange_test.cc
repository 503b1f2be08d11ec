// Per-worker sketches through real aggregator shards (UCX on loopback, in
// process): every worker's SketchExchange sketches its own gradient, the
// engines push the statistics tensor in FP32 to the shards, and the average
// every worker receives is the mean of the workers' own contributions within
// FP32 rounding (not the pull codec's BF16), the same bits on every worker.
#include "worker/owner/sketch_exchange.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_shape.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_rig.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker {
namespace {

constexpr uint32_t kWorld = 4;
constexpr int kServers = 2;
constexpr uint64_t kTensorId = 7, kStatsId = 1000;
constexpr int64_t kRows = 96, kCols = 80;

gift::v1::ClusterState StateWithPerWorkerSource() {
  gift::v1::ClusterState state;
  gift::v1::TensorInfo* t = state.add_tensors();
  t->set_tensor_id(kTensorId);
  t->set_name("layers.0.w");
  t->add_shape(kRows);
  t->add_shape(kCols);
  state.mutable_policy()->mutable_transform()->set_source(
      gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS);
  return state;
}

// Worker r's gradient: columns scaled over two orders of magnitude, rows by rank.
std::vector<float> Gradient(uint32_t rank) {
  std::mt19937 rng(17 + rank);
  std::normal_distribution<float> normal;
  std::vector<float> g(kRows * kCols);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      g[i * kCols + j] =
          normal(rng) * static_cast<float>(std::pow(10.0, -2.0 * j / kCols) * (1.0 + 0.5 * rank));
    }
  }
  return g;
}

// The step's one gradient tensor, holding `g`.
std::vector<LocalTensor> OneTensor(std::vector<float>& g) {
  return {{.tensor_id = kTensorId,
           .name = "layers.0.w",
           .rows = kRows,
           .cols = kCols,
           .data = g.data()}};
}

TEST(SketchExchangeTest, NamesAndLayoutFollowTheSettings) {
  const gift::v1::ClusterState state = StateWithPerWorkerSource();
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  const policy::TensorSettings settings =
      policy::ResolveTensorSettings(policy, "layers.0.w", std::vector<int64_t>{kRows, kCols});
  EXPECT_TRUE(UsesPerWorkerSketches(settings, std::vector<int64_t>{kRows, kCols}));
  EXPECT_FALSE(UsesPerWorkerSketches(settings, std::vector<int64_t>{1, kRows, kCols}));
  EXPECT_EQ(StatisticsTensorName("layers.0.w", settings), "layers.0.w#sketch.both");

  gift::v1::TensorSpec registered;
  SketchExchange sketches([&](const gift::v1::TensorSpec& spec) -> absl::StatusOr<uint64_t> {
    registered = spec;
    return kStatsId;
  });
  std::vector<float> g = Gradient(0);
  const std::vector<LocalTensor> tensors = OneTensor(g);
  // Output side n = 96 (k = 96), input side n = 80 (k = 80): n*k + n + 1 each.
  const int64_t size = (96 * 96 + 96 + 1) + (80 * 80 + 80 + 1);
  auto stats = sketches.Prepare(state, /*step=*/3, tensors);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  EXPECT_EQ((*stats)[0].tensor_id, kStatsId);
  EXPECT_EQ((*stats)[0].cols, static_cast<uint64_t>(kStatisticsColumns));
  EXPECT_EQ((*stats)[0].rows, static_cast<uint64_t>((size + kStatisticsColumns - 1) /
                                                    kStatisticsColumns));
  EXPECT_EQ(registered.name(), "layers.0.w#sketch.both");
  ASSERT_EQ(registered.shape_size(), 3);  // 3-D: never transformable, no owner
  EXPECT_EQ(sketches.Average(kTensorId).size(), static_cast<size_t>(size));

  // Another collect period: step 3 collects nothing; a failed exchange
  // leaves no average behind.
  gift::v1::ClusterState every_two = state;
  every_two.mutable_policy()->mutable_transform()->set_collect_period(2);
  auto none = sketches.Prepare(every_two, 3, tensors);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(sketches.Average(kTensorId).empty());
  ASSERT_TRUE(sketches.Prepare(every_two, 4, tensors).ok());
  sketches.Forget();
  EXPECT_TRUE(sketches.Average(kTensorId).empty());

  // A non-finite gradient is refused, not sent.
  g[5] = NAN;
  EXPECT_EQ(sketches.Prepare(state, 6, tensors).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SketchExchangeTest, AnOverridesColumnsSizeTheSketchAndNameANewStatisticsTensor) {
  gift::v1::ClusterState state = StateWithPerWorkerSource();
  std::vector<gift::v1::TensorSpec> registered;
  SketchExchange sketches([&](const gift::v1::TensorSpec& spec) -> absl::StatusOr<uint64_t> {
    registered.push_back(spec);
    return kStatsId + registered.size();
  });
  std::vector<float> g = Gradient(0);
  const std::vector<LocalTensor> tensors = OneTensor(g);
  ASSERT_TRUE(sketches.Prepare(state, /*step=*/1, tensors).ok());
  ASSERT_EQ(registered.size(), 1u);
  EXPECT_EQ(registered[0].name(), "layers.0.w#sketch.both");

  // 32 columns for this tensor: (n k + n + 1) per side, k = 32 on both.
  gift::v1::TensorOverride* o = state.mutable_policy()->add_overrides();
  o->set_glob("layers.*");
  o->set_statistics_columns(32);
  const policy::TensorSettings settings = policy::ResolveTensorSettings(
      policy::WithDefaults(state.policy()), "layers.0.w", std::vector<int64_t>{kRows, kCols});
  EXPECT_EQ(PerWorkerSketchSize(settings.transform), 32);
  EXPECT_EQ(GeometryOptionsFor(settings, kTensorId).sketch_size, 32);
  EXPECT_EQ(StatisticsTensorName("layers.0.w", settings), "layers.0.w#sketch.both.k32");
  const int64_t size = (96 * 32 + 96 + 1) + (80 * 32 + 80 + 1);
  auto stats = sketches.Prepare(state, /*step=*/2, tensors);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  // A new statistics tensor of the new shape; the gradient's own id is kept.
  ASSERT_EQ(registered.size(), 2u);
  EXPECT_EQ(registered[1].name(), "layers.0.w#sketch.both.k32");
  ASSERT_EQ(registered[1].shape_size(), 3);
  EXPECT_EQ(registered[1].shape(1), (size + kStatisticsColumns - 1) / kStatisticsColumns);
  EXPECT_EQ((*stats)[0].tensor_id, kStatsId + 2);
  EXPECT_EQ((*stats)[0].name, "layers.0.w#sketch.both.k32");
  EXPECT_EQ((*stats)[0].rows, registered[1].shape(1));
  EXPECT_EQ(sketches.Average(kTensorId).size(), static_cast<size_t>(size));
  // The statistics bytes shrink with the columns (128 by default: both
  // sides whole, 96 and 80 columns, as n < 128).
  const codec::CodecSpec bf16 = {.format = codec::Format::kBf16, .scaling = codec::Scaling::kNone};
  auto small = policy::StatisticsWireBytes(bf16, static_cast<uint64_t>(size));
  auto full = policy::StatisticsWireBytes(bf16, (96 * 96 + 96 + 1) + (80 * 80 + 80 + 1));
  ASSERT_TRUE(small.ok() && full.ok());
  EXPECT_LT(*small, *full / 2);
}

TEST(SketchExchangeTest, ActivationsPerWorkerSourceSketchesTheOutputSideOnly) {
  gift::v1::ClusterState state = StateWithPerWorkerSource();
  state.mutable_policy()->mutable_transform()->set_source(
      gift::v1::GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER);
  const std::vector<int64_t> shape = {kRows, kCols};
  const policy::TensorSettings settings =
      policy::ResolveTensorSettings(policy::WithDefaults(state.policy()), "layers.0.w", shape);
  EXPECT_TRUE(UsesPerWorkerSketches(settings, shape));
  EXPECT_EQ(StatisticsTensorName("layers.0.w", settings), "layers.0.w#sketch.output");
  gift::v1::TensorSpec registered;
  SketchExchange sketches([&](const gift::v1::TensorSpec& spec) -> absl::StatusOr<uint64_t> {
    registered = spec;
    return kStatsId;
  });
  std::vector<float> g = Gradient(0);
  const std::vector<LocalTensor> tensors = OneTensor(g);
  auto stats = sketches.Prepare(state, /*step=*/3, tensors);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  EXPECT_EQ(registered.name(), "layers.0.w#sketch.output");
  EXPECT_EQ(sketches.Average(kTensorId).size(), static_cast<size_t>(96 * 96 + 96 + 1));

  // Input side only: nothing of it is sketched, so nothing is exchanged.
  state.mutable_policy()->mutable_transform()->set_sides(gift::v1::SIDES_INPUT);
  const policy::TensorSettings input_only =
      policy::ResolveTensorSettings(policy::WithDefaults(state.policy()), "layers.0.w", shape);
  EXPECT_FALSE(UsesPerWorkerSketches(input_only, shape));
  auto none = sketches.Prepare(state, 4, tensors);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(SketchExchangeTest, ServersSumTheWorkersSketchesInFp32) {
  testing::EngineRig rig;
  ASSERT_TRUE(rig.Start({.servers = kServers,
                         .workers = kWorld,
                         .pull = codec::ParseCodecSpec("bf16").value(),
                         .ucx = true})
                  .ok());
  const std::vector<std::string>& servers = rig.servers;
  const std::vector<std::unique_ptr<PushPullEngine>>& engines = rig.engines;

  // Every worker sketches its own gradient with its own SketchExchange.
  const gift::v1::ClusterState state = StateWithPerWorkerSource();
  std::vector<std::vector<float>> grads;
  std::vector<std::unique_ptr<SketchExchange>> sketches;
  std::vector<std::vector<LocalTensor>> stats;
  std::vector<std::vector<float>> own;  // each worker's contribution
  for (uint32_t r = 0; r < kWorld; ++r) {
    grads.push_back(Gradient(r));
    sketches.push_back(std::make_unique<SketchExchange>(
        [](const gift::v1::TensorSpec&) -> absl::StatusOr<uint64_t> { return kStatsId; }));
    auto s = sketches[r]->Prepare(state, 10, {{.tensor_id = kTensorId,
                                               .name = "layers.0.w",
                                               .rows = kRows,
                                               .cols = kCols,
                                               .data = grads[r].data()}});
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->size(), 1u);
    stats.push_back(*s);
    const LocalTensor& t = stats[r][0];
    own.emplace_back(t.data, t.data + t.rows * t.cols);
  }
  const uint64_t rows = stats[0][0].rows, cols = stats[0][0].cols;
  const int64_t size = static_cast<int64_t>(sketches[0]->Average(kTensorId).size());

  // The statistics tensor in chunks of 16 rows over both shards.
  std::vector<ChunkRoute> routes;
  for (uint64_t row = 0, i = 0; row < rows; row += 16, ++i) {
    routes.push_back({.index = static_cast<uint32_t>(i),
                      .offset = row * cols,
                      .num_elements = std::min<uint64_t>(16, rows - row) * cols,
                      .server = servers[i % kServers]});
  }
  ASSERT_GE(routes.size(), 2u);
  ASSERT_TRUE(rig.SetEpoch(1, {{{kStatsId, rows, cols, 16, false}, routes}}).ok());

  std::vector<absl::Status> done(kWorld);
  std::vector<StepReport> reports(kWorld);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      StepPlan plan{.epoch = 1,
                    .step = 10,
                    .rank = r,
                    .world_size = kWorld};
      plan.tensors.push_back({.tensor_id = kStatsId,
                              .rows = rows,
                              .cols = cols,
                              .data = stats[r][0].data,
                              .chunks = routes,
                              .push_spec = codec::ParseCodecSpec("fp32").value()});
      auto report = engines[r]->Run(plan);
      done[r] = report.status();
      if (report.ok()) reports[r] = *report;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(done[r].ok()) << done[r];

  // The mean of the contributions, in double: the servers' FP32 sum in rank
  // order times 1/P may differ from it only by FP32 rounding.
  const absl::Span<const float> avg0 = sketches[0]->Average(kTensorId);
  ASSERT_EQ(avg0.size(), static_cast<size_t>(size));
  double max_scaled_error = 0;
  for (int64_t i = 0; i < size; ++i) {
    double mean = 0, magnitude = 0;
    for (uint32_t r = 0; r < kWorld; ++r) {
      mean += own[r][i] / static_cast<double>(kWorld);
      magnitude += std::abs(own[r][i]) / static_cast<double>(kWorld);
    }
    // kWorld additions and a scaling, each rounding by at most 2^-24.
    const double bound = (kWorld + 1) * std::ldexp(magnitude, -24) + 1e-30;
    max_scaled_error = std::max(max_scaled_error, std::abs(avg0[i] - mean) / bound);
    ASSERT_LE(std::abs(avg0[i] - mean), bound) << "value " << i;
  }
  // BF16 (the pull codec) would have rounded far beyond FP32's bound.
  std::cout << "largest error / FP32 bound: " << max_scaled_error << "\n";
  for (uint32_t r = 1; r < kWorld; ++r) {
    const absl::Span<const float> avg = sketches[r]->Average(kTensorId);
    ASSERT_EQ(avg.size(), avg0.size());
    EXPECT_EQ(std::memcmp(avg.data(), avg0.data(), avg.size() * sizeof(float)), 0)
        << "worker " << r;
  }
  // FP32 both ways: each chunk's payload is its FP32 bytes plus the payload
  // header, pushed once and pulled once by every worker.
  uint64_t fp32_payloads = 0;
  for (const ChunkRoute& c : routes) {
    const auto shape = dataplane::ChunkShapeOf(rows * cols, cols, c.offset, c.num_elements).value();
    const uint64_t dims[] = {shape.rows, shape.cols};
    fp32_payloads += codec::PayloadSizeFor(codec::ParseCodecSpec("fp32").value(), dims).value();
  }
  EXPECT_GE(fp32_payloads, rows * cols * sizeof(float));
  for (uint32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(reports[r].bytes_pushed, fp32_payloads) << "worker " << r;
    EXPECT_EQ(reports[r].bytes_pulled, fp32_payloads) << "worker " << r;
  }
  std::cout << "sketch bytes per worker and step, each way: " << fp32_payloads << " (contribution "
            << size * sizeof(float) << ", gradient FP32 " << kRows * kCols * sizeof(float) << ")\n";
  // The padding past the contribution stays zero.
  for (uint64_t i = size; i < rows * cols; ++i) ASSERT_EQ(stats[0][0].data[i], 0.0f);
}

}  // namespace
}  // namespace gift::worker
