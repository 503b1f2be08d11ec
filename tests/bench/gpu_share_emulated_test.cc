// The roles of `gift-bench gpu-share` (bench/gpu_share_bench_cuda.h) over the
// host emulation of the CUDA runtime, kernels and cuBLAS (tests/kernels/),
// everywhere: the JSON lines each prints, the step count a rate allows, and
// the stop flag. The emulation runs every call to completion, so nothing
// here says anything about time on a GPU.
#include <atomic>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gpu_share_bench.h"
#include "bench/gpu_share_bench_cuda.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

std::vector<nlohmann::json> Lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

GpuShareOptions SmallTrainer() {
  GpuShareOptions o;
  o.role = "trainer";
  o.tokens = 16;
  o.hidden = 8;
  o.ffn = 12;
  o.layers = 2;
  o.warmup = 1;
  o.seconds = 0.2;
  o.report_every_s = 0.05;
  return o;
}

GpuShareOptions SmallWorker() {
  GpuShareOptions o;
  o.role = "worker";
  o.shape = "64x48";
  o.rank = 4;
  o.seconds = 0.3;
  o.report_every_s = 0.05;
  return o;
}

TEST(GpuShareTest, TrainerPrintsReadyWindowsAndASummary) {
  std::atomic<bool> stop{false};
  std::ostringstream out;
  ASSERT_TRUE(RunGpuShareTrainer(SmallTrainer(), stop, out).ok());
  const std::vector<nlohmann::json> lines = Lines(out.str());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front()["event"], "ready");
  EXPECT_EQ(lines.front()["role"], "trainer");
  EXPECT_EQ(lines.front()["stream_priority"], 0);  // normal
  // 2 layers x 4 linears x 2 GEMMs of 2 M in out flops each.
  const double h = 8, f = 12, m = 16;
  const double flops = 2 * 2 * 2 * m * (h * 3 * h + h * h + h * 2 * f + f * h);
  EXPECT_DOUBLE_EQ(lines.front()["config"]["gflop_per_iteration"].get<double>(), flops * 1e-9);
  const nlohmann::json& summary = lines.back();
  EXPECT_EQ(summary["event"], "summary");
  EXPECT_FALSE(summary["stopped_by_signal"].get<bool>());
  ASSERT_GT(summary["iterations"].get<int>(), 0);
  EXPECT_GE(summary["p90_ms"].get<double>(), summary["median_ms"].get<double>());
  EXPECT_GE(summary["median_ms"].get<double>(), summary["min_ms"].get<double>());
  int window_iterations = 0;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["event"], "window");
    window_iterations += lines[i]["iterations"].get<int>();
  }
  EXPECT_LE(window_iterations, summary["iterations"].get<int>());
}

TEST(GpuShareTest, TrainerAtHighestPriorityUsesTheDevicesGreatest) {
  GpuShareOptions o = SmallTrainer();
  o.priority = "highest";
  o.seconds = 0.01;
  std::atomic<bool> stop{false};
  std::ostringstream out;
  ASSERT_TRUE(RunGpuShareTrainer(o, stop, out).ok());
  const nlohmann::json ready = Lines(out.str()).front();
  EXPECT_EQ(ready["stream_priority"], ready["priority_greatest"]);
}

TEST(GpuShareTest, WorkerBackToBackRunsStepsAtTheLowestPriority) {
  std::atomic<bool> stop{false};
  std::ostringstream out;
  ASSERT_TRUE(RunGpuShareWorker(SmallWorker(), stop, out).ok());
  const std::vector<nlohmann::json> lines = Lines(out.str());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front()["event"], "ready");
  EXPECT_EQ(lines.front()["stream_priority"], lines.front()["priority_least"]);
  EXPECT_EQ(lines.front()["config"]["shape"], "64x48");
  const nlohmann::json& summary = lines.back();
  EXPECT_EQ(summary["event"], "summary");
  ASSERT_GT(summary["steps"].get<int>(), 0);
  EXPECT_GT(summary["steps_per_s"].get<double>(), 0);
  EXPECT_GT(summary["busy_fraction"].get<double>(), 0);
  EXPECT_LE(summary["busy_fraction"].get<double>(), 1.0);
  EXPECT_GE(summary["step_p90_ms"].get<double>(), summary["step_median_ms"].get<double>());
  // Every line carries the wall clock; windows their length.
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(lines[i].contains("unix_s")) << i;
    if (lines[i]["event"] == "window") {
      EXPECT_GT(lines[i]["window_s"].get<double>(), 0) << i;
      EXPECT_NEAR(lines[i]["steps_per_s"].get<double>(),
                  lines[i]["steps"].get<double>() / lines[i]["window_s"].get<double>(), 1e-9);
    }
  }
}

TEST(GpuShareTest, APacedWorkerStartsNoMoreStepsThanItsRateAllows) {
  GpuShareOptions o = SmallWorker();
  o.rate = 20;  // a step every 50 ms: in 0.3 s, starts at 0, 50, ..., 300 ms at most
  std::atomic<bool> stop{false};
  std::ostringstream out;
  ASSERT_TRUE(RunGpuShareWorker(o, stop, out).ok());
  const nlohmann::json summary = Lines(out.str()).back();
  EXPECT_GT(summary["steps"].get<int>(), 0);
  EXPECT_LE(summary["steps"].get<int>(), 7);
}

TEST(GpuShareTest, TheStopFlagEndsBothRolesWithASummary) {
  std::atomic<bool> stop{true};
  for (const GpuShareOptions& o : {SmallTrainer(), SmallWorker()}) {
    GpuShareOptions forever = o;
    forever.seconds = 3600;  // only the flag can end it
    std::ostringstream out;
    ASSERT_TRUE((o.role == "trainer" ? RunGpuShareTrainer(forever, stop, out)
                                     : RunGpuShareWorker(forever, stop, out))
                    .ok());
    const nlohmann::json summary = Lines(out.str()).back();
    EXPECT_EQ(summary["event"], "summary") << o.role;
    EXPECT_TRUE(summary["stopped_by_signal"].get<bool>()) << o.role;
  }
}

}  // namespace
}  // namespace gift::bench
