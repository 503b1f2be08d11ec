#include "bench/fidelity_methods.h"

#include <Eigen/Dense>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/fidelity_target_choice.h"
#include "bench/npy_file.h"
#include "common/base/temp_dir.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRows = 32;
constexpr int64_t kCols = 128;
constexpr int kWorkers = 4;

// This process's scratch directory: ctest runs the tests of this file as
// parallel processes, which must not write the same .npy files.
std::string Scratch(const std::string& name) {
  static const absl::StatusOr<TempDir> dir = TempDir::Create("fidelity-methods-test");
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? dir->File(name) : absl::StrCat("/nonexistent/", name);
}

// Anisotropic worker gradients: G_w = U diag(s) V^T (s_k = k^-1.5, rank 24)
// plus a per-worker perturbation of the same structure, all rows and columns
// dominated by a few directions.
std::vector<std::vector<double>> MakeWorkers(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  auto gaussian = [&](int64_t r, int64_t c) {
    Eigen::MatrixXd m(r, c);
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < c; ++j) m(i, j) = normal(rng);
    }
    return m;
  };
  const int64_t k = 24;
  const Eigen::MatrixXd u =
      gaussian(kRows, k).householderQr().householderQ() * Eigen::MatrixXd::Identity(kRows, k);
  const Eigen::MatrixXd v =
      gaussian(kCols, k).householderQr().householderQ() * Eigen::MatrixXd::Identity(kCols, k);
  Eigen::VectorXd s(k);
  for (int64_t i = 0; i < k; ++i) s(i) = std::pow(static_cast<double>(i + 1), -1.5);
  std::vector<std::vector<double>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    const Eigen::MatrixXd mix =
        Eigen::MatrixXd::Identity(k, k) + 0.5 * gaussian(k, k) / std::sqrt(k);
    const Eigen::MatrixXd g =
        u * s.asDiagonal() * mix * v.transpose() + 1e-3 * gaussian(kRows, kCols);
    std::vector<double> values(kRows * kCols);
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) values[i * kCols + j] = g(i, j);
    }
    workers.push_back(std::move(values));
  }
  return workers;
}

// Writes the workers of `seed` as float32 .npy files; returns their paths.
std::vector<std::string> WriteWorkers(const std::string& prefix, uint32_t seed) {
  std::vector<std::string> paths;
  const std::vector<std::vector<double>> workers = MakeWorkers(seed);
  for (int w = 0; w < kWorkers; ++w) {
    paths.push_back(Scratch(absl::StrCat(prefix, "_w", w, ".npy")));
    EXPECT_TRUE(WriteNpy(paths.back(), workers[w], kRows, kCols, NpyDtype::kFloat32).ok());
  }
  return paths;
}

// Writes a square statistic: the per-worker (or mean) second moment of the
// workers of another seed, as an "earlier step" would give.
std::string WriteStatistic(const std::string& name, bool input_side, bool per_worker) {
  const std::vector<std::vector<double>> workers = MakeWorkers(99);
  const int64_t n = input_side ? kCols : kRows;
  Eigen::MatrixXd acc = Eigen::MatrixXd::Zero(n, n);
  Eigen::MatrixXd mean = Eigen::MatrixXd::Zero(kRows, kCols);
  for (const std::vector<double>& w : workers) {
    const Eigen::MatrixXd g =
        Eigen::Map<const Eigen::Matrix<double, kRows, kCols, Eigen::RowMajor>>(w.data());
    mean += g / kWorkers;
    acc += input_side ? Eigen::MatrixXd(g.transpose() * g) : Eigen::MatrixXd(g * g.transpose());
  }
  if (!per_worker) {
    acc = input_side ? Eigen::MatrixXd(mean.transpose() * mean)
                     : Eigen::MatrixXd(mean * mean.transpose());
  }
  const std::string path = Scratch(absl::StrCat(name, ".npy"));
  EXPECT_TRUE(
      WriteNpy(path, std::vector<double>(acc.data(), acc.data() + n * n), n, n, NpyDtype::kFloat64)
          .ok());
  return path;
}

nlohmann::json RunToJson(const RealFidelityOptions& options_in, absl::Status* status) {
  RealFidelityOptions options = options_in;
  options.json_path = Scratch("fidelity_methods_test.json");
  options.threads = 2;
  *status = RunRealGradientFidelity(options);
  if (!status->ok()) return nullptr;
  std::ifstream in(options.json_path);
  return nlohmann::json::parse(in);
}

const nlohmann::json* Find(const nlohmann::json& list, const std::string& method,
                           const std::string& spec) {
  for (const nlohmann::json& r : list) {
    if (r["method"] == method && r["spec"] == spec) return &r;
  }
  return nullptr;
}

TEST(FidelityMethodsTest, FullGridHasEveryFieldSourceAndMethod) {
  RealFidelityOptions options;
  options.grads = WriteWorkers("grid", 1);
  options.gram_in = WriteStatistic("gram_in", true, false);
  options.gram_out = WriteStatistic("gram_out", false, false);
  options.pw_gram_in = WriteStatistic("pw_gram_in", true, true);
  options.pw_gram_out = WriteStatistic("pw_gram_out", false, true);
  options.factor = WriteStatistic("factor", true, true);
  options.ranks = {8, 0};
  options.specs = {"e5m2/tensor", "e4m3/block128"};
  absl::Status status;
  const nlohmann::json list = RunToJson(options, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(list.is_array());

  // 1 direct + 1 hadamard + 1 dense, then the family: (both: 6 sources,
  // the activations with either output side; input: 5; output: 4 without
  // activations) x 3 powers x 2 ranks x 2 residuals; each with 2 specs.
  EXPECT_EQ(list.size(), 2u * (3 + 15 * 3 * 2 * 2));
  std::set<std::string> sources;
  for (const nlohmann::json& r : list) {
    for (const char* field :
         {"method", "transform", "format", "scaling", "sides", "power", "rank", "rel_l2_single",
          "cos_single", "rel_l2_avg", "cos_avg", "underflow_frac", "saturation_frac",
          "ratio_vs_direct", "source", "residual", "spec"}) {
      EXPECT_TRUE(r.contains(field)) << r["method"] << " lacks " << field;
    }
    EXPECT_GT(r["rel_l2_avg"].get<double>(), 0) << r["method"];
    EXPECT_LE(std::fabs(r["cos_avg"].get<double>()), 1.0 + 1e-12) << r["method"];
    EXPECT_GE(r["underflow_frac"].get<double>(), 0);
    EXPECT_LE(r["underflow_frac"].get<double>(), 1);
    sources.insert(r["source"].get<std::string>());
  }
  EXPECT_EQ(sources, (std::set<std::string>{"none", "activations", "activations+ema-per-worker",
                                            "activations+ema-mean", "step-mean", "step-per-worker",
                                            "ema-mean", "ema-per-worker"}));
  const nlohmann::json* dense = Find(list, "dense/activations/rfull", "e5m2/tensor");
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ((*dense)["power"], 0.5);
  ASSERT_NE(Find(list, "hadamard", "e4m3/block128"), nullptr);
  EXPECT_EQ((*Find(list, "direct", "e4m3/block128"))["ratio_vs_direct"], 1.0);
}

TEST(FidelityMethodsTest, DirectMatchesReduceEncodedAndTheFamilyBeatsIt) {
  RealFidelityOptions options;
  options.grads = WriteWorkers("direct", 2);
  options.specs = {"e4m3/block128"};
  options.ranks = {16};
  options.powers = {0.25};
  options.filter = {"family/both/", "/step-per-worker/", "/iso"};
  absl::Status status;
  const nlohmann::json list = RunToJson(options, &status);
  ASSERT_TRUE(status.ok()) << status;
  // direct, then the one family configuration (hadamard and dense filtered).
  ASSERT_EQ(list.size(), 2u);

  // The direct error from the codec alone.
  const std::vector<std::vector<double>> workers = MakeWorkers(2);
  const codec::CodecSpec spec = *codec::ParseCodecSpec("e4m3/block128");
  std::vector<codec::EncodedTensor> encoded;
  std::vector<codec::EncodedView> views;
  std::vector<double> exact(kRows * kCols, 0.0);
  for (int w = 0; w < kWorkers; ++w) {
    const std::vector<float> g(workers[w].begin(), workers[w].end());
    for (size_t i = 0; i < g.size(); ++i) exact[i] += static_cast<double>(g[i]) / kWorkers;
    encoded.push_back(*codec::EncodedTensor::Create(spec, kRows, kCols));
    ASSERT_TRUE(codec::Encode(g.data(), encoded.back().mutable_view(),
                              {.tensor = 1, .step = 0, .rank = static_cast<uint32_t>(w)})
                    .ok());
  }
  for (const codec::EncodedTensor& e : encoded) views.push_back(e.view());
  std::vector<float> avg(kRows * kCols);
  ASSERT_TRUE(codec::ReduceEncoded(views, avg.data(), 1.0f / kWorkers, {}).ok());
  double num = 0, den = 0;
  for (size_t i = 0; i < avg.size(); ++i) {
    num += (avg[i] - exact[i]) * (avg[i] - exact[i]);
    den += exact[i] * exact[i];
  }
  const nlohmann::json* direct = Find(list, "direct", "e4m3/block128");
  ASSERT_NE(direct, nullptr);
  EXPECT_NEAR((*direct)["rel_l2_avg"].get<double>(), std::sqrt(num / den), 1e-12);
  EXPECT_EQ((*direct)["transform"], "identity");

  const nlohmann::json& family = list[1];
  EXPECT_EQ(family["method"], "family/both/p0.25/step-per-worker/r16/iso");
  EXPECT_EQ(family["sides"], "both");
  EXPECT_EQ(family["rank"], 16);
  EXPECT_LT(family["rel_l2_avg"].get<double>(), 0.8 * (*direct)["rel_l2_avg"].get<double>());
  EXPECT_LT(family["ratio_vs_direct"].get<double>(), 0.8);
}

TEST(FidelityMethodsTest, UnderflowAndSaturationAreCounted) {
  // Values spanning far more than E4M3's range under one per-tensor scale
  // underflow; BF16 keeps them.
  std::vector<float> w(64);
  for (int j = 0; j < 64; ++j) w[j] = std::ldexp(1.0f, -j);
  WorkerGradients g{.d_out = 1, .d_in = 64, .workers = {w, w}};
  MethodGridOptions options;
  options.specs = {*codec::ParseCodecSpec("e4m3/tensor"), *codec::ParseCodecSpec("bf16")};
  options.filter = {"no such method"};
  absl::StatusOr<std::vector<MethodResult>> r = MeasureMethodGrid(g, {}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  // E4M3 (max 448 = 2^8.8, smallest subnormal 2^-9) keeps 2^0 .. 2^-17 of a
  // tensor scaled to 2^0 -> 448: 1/448 * 2^-j >= 2^-10 for j <= 18 or so.
  EXPECT_GT((*r)[0].underflow_frac, 0.6);
  EXPECT_LT((*r)[0].underflow_frac, 0.8);
  EXPECT_EQ((*r)[0].saturation_frac, 0.0);
  EXPECT_EQ((*r)[1].underflow_frac, 0.0);
  EXPECT_EQ((*r)[1].rel_l2_avg, 0.0);

  // BF16 is unscaled: values beyond its max (about 3.3895e38) saturate. One
  // worker, so that the FP32 sum does not overflow.
  std::vector<float> big(64, 1.0f);
  big[3] = 3.4e38f;
  g.workers = {big};
  options.specs = {*codec::ParseCodecSpec("bf16")};
  r = MeasureMethodGrid(g, {}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ((*r)[0].saturation_frac, 1.0 / 64);
}

TEST(FidelityMethodsTest, ARotationInBlocksLiftsWhatNvfp4FlushesAndIsUndoneExactly) {
  // One large element per 16-element block, the rest 1/64 of it: NVFP4
  // (E2M1 under an E4M3 scale per 16) flushes the small ones to zero; a
  // randomized Hadamard rotation of each block spreads the large one over
  // all 16 first, and is undone exactly after the sum. (Here the flushed
  // elements hold 0.4 % of the energy, and the rotated block's E2M1
  // rounding costs more than they did: whether a rotation pays is measured
  // on real gradients, docs/fidelity.md.)
  std::vector<float> w(256, 1.0f / 64);
  for (size_t j = 0; j < w.size(); j += 16) w[j] = 1.0f;
  WorkerGradients g{.d_out = 2, .d_in = 128, .workers = {w, w}};
  MethodGridOptions options;
  options.specs = {*codec::ParseCodecSpec("nvfp4"), *codec::ParseCodecSpec("fp32")};
  options.filter = {"no such method"};  // direct alone
  absl::StatusOr<std::vector<MethodResult>> plain = MeasureMethodGrid(g, {}, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  options.rotate_block = 16;
  absl::StatusOr<std::vector<MethodResult>> rotated = MeasureMethodGrid(g, {}, options);
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  ASSERT_EQ(rotated->size(), 2u);
  EXPECT_EQ((*rotated)[0].method, "direct+rht16");
  EXPECT_GT((*plain)[0].underflow_frac, 0.9);
  EXPECT_LT((*rotated)[0].underflow_frac, 0.1);
  EXPECT_LT((*rotated)[1].rel_l2_avg, 1e-6);  // FP32: the inverse is exact to rounding
  options.rotate_block = 24;                  // not a power of two
  EXPECT_TRUE(absl::IsInvalidArgument(MeasureMethodGrid(g, {}, options).status()));
}

// The sketch codec rounds the per-worker statistics only (they travel; the
// reduced gradient's EMA is the owner's own); an FP32 trip is exact.
TEST(FidelityMethodsTest, TheSketchCodecRoundsOnlyTheStatisticsThatTravel) {
  RealFidelityOptions options;
  options.grads = WriteWorkers("sketch_codec", 4);
  options.gram_in = WriteStatistic("sc_gram_in", /*input_side=*/true, /*per_worker=*/false);
  options.gram_out = WriteStatistic("sc_gram_out", false, false);
  options.pw_gram_in = WriteStatistic("sc_pw_in", true, true);
  options.pw_gram_out = WriteStatistic("sc_pw_out", false, true);
  options.specs = {"e4m3/block128"};
  options.ranks = {8};
  options.powers = {0.25};
  options.filter = {"family/both/", "/iso"};
  options.sketch_size = 24;
  options.sketch_steps = 8;
  auto run = [&](const char* codec) {
    options.sketch_codec = codec;
    absl::Status status;
    nlohmann::json list = RunToJson(options, &status);
    EXPECT_TRUE(status.ok()) << status;
    return list;
  };
  const nlohmann::json exact = run("fp32"), bf16 = run("bf16"), fp8 = run("e4m3/block128/sr");
  auto error = [](const nlohmann::json& list, const std::string& source) {
    const nlohmann::json* r =
        Find(list, absl::StrCat("family/both/p0.25/", source, "/r8/iso"), "e4m3/block128");
    EXPECT_NE(r, nullptr) << source;
    return r == nullptr ? 0.0 : (*r)["rel_l2_avg"].get<double>();
  };
  for (const char* source : {"ema-mean", "step-mean"}) {
    EXPECT_EQ(error(bf16, source), error(exact, source)) << source;
    EXPECT_EQ(error(fp8, source), error(exact, source)) << source;
  }
  for (const char* source : {"ema-per-worker", "step-per-worker"}) {
    EXPECT_NE(error(bf16, source), error(exact, source)) << source;
    EXPECT_NE(error(fp8, source), error(exact, source)) << source;
  }

  // An FP32 trip changes nothing that matters: as a sketch that arrives exact.
  WorkerGradients grads{.d_out = kRows, .d_in = kCols};
  for (const std::vector<double>& w : MakeWorkers(4)) grads.workers.emplace_back(w.begin(), w.end());
  GridStatistics stats;
  stats.pw_gram_in = Eigen::MatrixXd::Identity(kCols, kCols);
  stats.pw_gram_out = Eigen::MatrixXd::Identity(kRows, kRows);
  for (int64_t i = 0; i < 8; ++i) {
    (*stats.pw_gram_in)(i, i) = 100.0 / (i + 1);
    (*stats.pw_gram_out)(i, i) = 50.0 / (i + 1);
  }
  MethodGridOptions grid;
  grid.specs = {*codec::ParseCodecSpec("e4m3/block128")};
  grid.ranks = {8};
  grid.powers = {0.25};
  grid.filter = {"family/both/", "/ema-per-worker/", "/iso"};
  grid.sketch_size = 24;
  absl::StatusOr<std::vector<MethodResult>> arrived_exact = MeasureMethodGrid(grads, stats, grid);
  grid.sketch_codec = *codec::ParseCodecSpec("fp32");
  absl::StatusOr<std::vector<MethodResult>> through_fp32 = MeasureMethodGrid(grads, stats, grid);
  ASSERT_TRUE(arrived_exact.ok()) << arrived_exact.status();
  ASSERT_TRUE(through_fp32.ok()) << through_fp32.status();
  ASSERT_EQ(arrived_exact->size(), 2u);
  ASSERT_EQ(through_fp32->size(), 2u);
  // (Its 2^-24 rounding noise moves the Nystrom shift, not the basis.)
  EXPECT_NEAR((*arrived_exact)[1].rel_l2_avg, (*through_fp32)[1].rel_l2_avg,
              1e-6 * (*arrived_exact)[1].rel_l2_avg);

  options.sketch_codec = "e4m3/block7";
  absl::Status status;
  RunToJson(options, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  options.sketch_codec = "bf16";
  options.sketch_steps = 0;
  RunToJson(options, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// The target's choice on hand-made measurements of a 1024 x 1024 matrix: an
// NVFP4 option from an output-side per-worker sketch at 0.9x the target's
// error saves 1024^2 x (1 + 4/128 - 0.5 - 1/16 - ...) bytes of push, about
// 0.49 MB; its sketch, 1024 x 129 + 1 values both ways, costs 0.53 MB in
// BF16 and 0.27 MB in E4M3 block-128. So BF16 statistics keep it direct and
// E4M3 statistics choose it.
TEST(FidelityTargetChoiceTest, TheStatisticsCodecDecidesWhetherASketchedOptionPays) {
  auto result = [](const std::string& method, const std::string& spec, const std::string& source,
                   double error) {
    MethodResult r;
    r.method = method;
    r.spec = spec;
    r.sides = method == "direct" ? "none" : "output";
    r.source = source;
    r.rank = method == "direct" ? 0 : 64;
    r.rel_l2_avg = error;
    return r;
  };
  const std::vector<MethodResult> results = {
      result("direct", "e4m3/block128", "none", 1.0), result("direct", "nvfp4", "none", 1.6),
      result("family/output/p0.25/ema-per-worker/r64/iso", "nvfp4", "ema-per-worker", 0.9)};
  TargetChoiceOptions options{.target = "e4m3/block128", .d_out = 1024, .d_in = 1024};
  const uint64_t dims[] = {1024, 1024};
  const double fp8 = static_cast<double>(*codec::PayloadSizeFor(*codec::ParseCodecSpec("e4m3/block128"), dims));
  const double fp4 = static_cast<double>(*codec::PayloadSizeFor(*codec::ParseCodecSpec("nvfp4"), dims));
  const double basis = 4.0 * 64 * 1024 / options.refresh_period;
  const double saving = fp8 - fp4 - basis;
  const double sketch_values = 1024 * 129 + 1;
  std::ostringstream os;
  absl::StatusOr<nlohmann::json> bf16 = PrintTargetChoice(results, options, os);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_GT(4 * sketch_values, saving);  // BF16 both ways: more than it saves
  EXPECT_EQ((*bf16)["chosen"]["method"], "direct");
  EXPECT_EQ((*bf16)["chosen"]["spec"], "e4m3/block128");

  options.statistics_codec = *codec::ParseCodecSpec("e4m3/block128");
  absl::StatusOr<nlohmann::json> fp8_stats = PrintTargetChoice(results, options, os);
  ASSERT_TRUE(fp8_stats.ok()) << fp8_stats.status();
  EXPECT_LT(2.1 * sketch_values, saving);  // E4M3 both ways: less
  EXPECT_EQ((*fp8_stats)["chosen"]["method"], "family/output/p0.25/ema-per-worker/r64/iso");
  const double target_bytes = (*fp8_stats)["target_bytes_per_step"].get<double>();
  EXPECT_DOUBLE_EQ(target_bytes, 2 * fp8);
  const double bytes = (*fp8_stats)["chosen"]["bytes_per_step"].get<double>();
  EXPECT_NEAR(bytes, fp4 + fp8 + basis + 2.0 * 1.03 * sketch_values, 0.01 * sketch_values);
}

TEST(FidelityMethodsTest, InputErrorsAreReported) {
  RealFidelityOptions options;
  options.grads = WriteWorkers("mismatch", 3);
  const std::string other = Scratch("mismatch_other.npy");
  ASSERT_TRUE(
      WriteNpy(other, std::vector<double>(kRows * 2, 1.0), kRows, 2, NpyDtype::kFloat32).ok());
  options.grads.push_back(other);
  absl::Status status;
  RunToJson(options, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("all --grads must match"));
  EXPECT_THAT(status.message(), HasSubstr("mismatch_other.npy"));

  options.grads.pop_back();
  options.gram_in = WriteStatistic("wrong_side", /*input_side=*/false, true);
  RunToJson(options, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("wrong_side.npy (--gram-in) is 32x32 but must be 128x128"));

  options.gram_in = other;  // not square
  RunToJson(options, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("is 32x2 but must be 128x128"));

  // The library checks the statistics it is given too.
  WorkerGradients g{.d_out = 2, .d_in = 3, .workers = {std::vector<float>(6, 1.0f)}};
  GridStatistics stats;
  stats.pw_gram_out = Eigen::MatrixXd::Identity(3, 3);
  MethodGridOptions grid;
  grid.specs = {*codec::ParseCodecSpec("bf16")};
  absl::StatusOr<std::vector<MethodResult>> r = MeasureMethodGrid(g, stats, grid);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("pw-gram-out is 3x3 but must be 2x2"));
  stats.pw_gram_out = Eigen::MatrixXd::Identity(2, 2);
  stats.pw_gram_out->coeffRef(0, 1) = std::nan("");
  r = MeasureMethodGrid(g, stats, grid);
  EXPECT_THAT(r.status().message(), HasSubstr("non-finite"));
}

}  // namespace
}  // namespace gift::bench
