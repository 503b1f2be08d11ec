#include "bench/refresh_bench.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/codec_bench_cuda.h"
#include "bench/refresh_bench_cuda.h"
#include "common/base/relative_error.h"
#include "common/base/status_macros.h"
#include "common/transform/blas_runtime.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"

namespace gift::bench {
namespace {

using transform::SecondMomentEma;
using transform::SideBasis;
using transform::TensorBasis;

constexpr double kDecay = SecondMomentEma::kDefaultDecay;

absl::StatusOr<std::pair<int64_t, int64_t>> ParseRefreshShape(const std::string& text) {
  GIFT_ASSIGN_OR_RETURN(const MatrixShape s, ParseMatrixShape(text, 65536));
  return std::make_pair(s.rows, s.cols);
}

double SecondsOf(const std::function<absl::Status()>& fn, absl::Status* status) {
  const auto start = std::chrono::steady_clock::now();
  *status = fn();
  return SecondsSince(start);
}

struct CpuShape {
  double update_s = 0;
  std::map<int64_t, double> basis_s;
  std::map<int64_t, TensorBasis> bases;
};

// The CPU refresh of one shape: one EMA step of both sides (after one
// untimed step that sets the average), then the basis at each rank; each
// timed once.
absl::StatusOr<CpuShape> RunCpuShape(int64_t d_out, int64_t d_in, const std::vector<int64_t>& ranks,
                                     const std::vector<float>& g) {
  GIFT_ASSIGN_OR_RETURN(SecondMomentEma in, SecondMomentEma::Create(d_in, kDecay));
  GIFT_ASSIGN_OR_RETURN(SecondMomentEma out, SecondMomentEma::Create(d_out, kDecay));
  const auto update = [&]() -> absl::Status {
    GIFT_RETURN_IF_ERROR(in.UpdateInputSide({g.data()}, d_out, d_in));
    return out.UpdateOutputSide({g.data()}, d_out, d_in);
  };
  GIFT_RETURN_IF_ERROR(update());
  CpuShape cpu;
  absl::Status status;
  cpu.update_s = SecondsOf(update, &status);
  GIFT_RETURN_IF_ERROR(status);
  for (const int64_t rank : ranks) {
    std::optional<TensorBasis> basis;
    cpu.basis_s[rank] = SecondsOf(
        [&]() -> absl::Status {
          GIFT_ASSIGN_OR_RETURN(SideBasis o,
                                SideBasis::FromFactor(out.value(), std::min(rank, d_out)));
          GIFT_ASSIGN_OR_RETURN(SideBasis i, SideBasis::FromFactor(in.value(), std::min(rank, d_in)));
          GIFT_ASSIGN_OR_RETURN(
              TensorBasis b,
              TensorBasis::Create({.tensor_id = 1, .version = 1, .d_out = d_out, .d_in = d_in},
                                  std::move(o), std::move(i)));
          basis.emplace(std::move(b));
          return absl::OkStatus();
        },
        &status);
    GIFT_RETURN_IF_ERROR(status);
    cpu.bases.emplace(rank, *std::move(basis));
  }
  return cpu;
}

// Relative Frobenius error of gpu's forward of g against cpu's (used only
// where gift-bench has CUDA).
[[maybe_unused]] absl::StatusOr<double> ActionError(const TensorBasis& gpu, const TensorBasis& cpu,
                                                    const std::vector<float>& g) {
  const int64_t d_out = cpu.header().d_out, d_in = cpu.header().d_in;
  std::vector<float> a(g.size()), b(g.size());
  GIFT_RETURN_IF_ERROR(gpu.Forward(g.data(), d_out, d_in, a.data()));
  GIFT_RETURN_IF_ERROR(cpu.Forward(g.data(), d_out, d_in, b.data()));
  return RelativeL2(a, b);
}

absl::Status Run(const RefreshBenchOptions& options) {
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  if (options.reps < 1) return absl::InvalidArgumentError("--reps must be >= 1");
  const std::vector<std::string> names =
      options.shapes.empty() ? std::vector<std::string>{"4096x4096", "4096x11008"}
                             : options.shapes;
  const std::vector<int64_t> ranks =
      options.ranks.empty() ? std::vector<int64_t>{64, 128} : options.ranks;
  for (const int64_t r : ranks) {
    if (r < 1) return absl::InvalidArgumentError("--ranks must be >= 1");
  }
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const std::string& name : names) {
    GIFT_ASSIGN_OR_RETURN(auto s, ParseRefreshShape(name));
    shapes.push_back(s);
  }
  std::string gpu_skipped = "--gpu was not given";
#ifdef GIFT_BENCH_WITH_CUDA
  if (options.gpu) gpu_skipped = GpuUnavailableReason();
#else
  if (options.gpu) gpu_skipped = "gift-bench was built without CUDA (GIFT_HAVE_CUDA is off)";
#endif
  os << absl::StrFormat(
      "gift-bench refresh: EMA step of both sides + two-sided isotropic TensorBasis (oversample "
      "8, 3 power iterations), decay %.2f\nCPU: double, dsyrk on %d BLAS threads (%s), the "
      "eigen products in Eigen on 1 thread, each timed once; GPU: FP32 cuBLAS/cuSOLVER, median "
      "of %d after 1 warm-up, wall clock with the host part\n",
      kDecay, transform::BlasThreads(), transform::BlasLibrary(), options.reps);
  if (!gpu_skipped.empty()) os << "GPU part skipped: " << gpu_skipped << '\n';

  nlohmann::json doc = {{"shapes", nlohmann::json::array()}};
  absl::Status gpu_status = absl::OkStatus();
  for (const auto& [d_out, d_in] : shapes) {
    const std::string shape_name = absl::StrCat(d_out, "x", d_in);
    const std::vector<float> g =
        MakeGradientLikeInput(static_cast<uint64_t>(d_out), static_cast<uint64_t>(d_in),
                              options.seed, nullptr);
    nlohmann::json shape_json = {{"shape", shape_name}};
    std::optional<CpuShape> cpu;
    if (std::max(d_out, d_in) <= options.cpu_max_dim) {
      GIFT_ASSIGN_OR_RETURN(CpuShape c, RunCpuShape(d_out, d_in, ranks, g));
      cpu.emplace(std::move(c));
      shape_json["cpu"] = {{"update_s", cpu->update_s}};
      for (const int64_t r : ranks) shape_json["cpu"]["basis_s_r" + std::to_string(r)] = cpu->basis_s[r];
      os << absl::StrFormat("%-11s CPU update %9.4f s", shape_name, cpu->update_s);
      for (const int64_t r : ranks) os << absl::StrFormat("  basis r%d %9.4f s", r, cpu->basis_s[r]);
      os << '\n';
    } else {
      os << absl::StrFormat("%-11s CPU skipped: max dimension %d > --cpu-max-dim %d\n", shape_name,
                            std::max(d_out, d_in), options.cpu_max_dim);
      shape_json["cpu"] = {{"skipped", true}};
    }
#ifdef GIFT_BENCH_WITH_CUDA
    if (gpu_skipped.empty()) {
      std::map<int64_t, double> errors;
      GpuRefreshShapeConfig config{.d_out = d_out, .d_in = d_in, .ranks = ranks, .gradient = &g,
                                   .reps = options.reps, .decay = kDecay};
      absl::Status compare = absl::OkStatus();
      if (cpu.has_value()) {
        config.on_basis = [&](int64_t rank, const TensorBasis& gpu_basis) {
          absl::StatusOr<double> e = ActionError(gpu_basis, cpu->bases.at(rank), g);
          if (e.ok()) errors[rank] = *e;
          else if (compare.ok()) compare = e.status();
        };
      }
      absl::StatusOr<nlohmann::json> gpu = RunGpuRefreshShape(config);
      if (gpu.ok() && compare.ok()) {
        const double update_s = (*gpu)["update_s"].get<double>();
        os << absl::StrFormat("%-11s GPU update %9.4f s", shape_name, update_s);
        if (cpu.has_value()) os << absl::StrFormat(" (CPU/GPU %.1fx)", cpu->update_s / update_s);
        os << '\n';
        for (nlohmann::json& b : (*gpu)["bases"]) {
          const int64_t r = b["rank"].get<int64_t>();
          const double basis_s = b["basis_s"].get<double>();
          os << absl::StrFormat("%-11s GPU basis r%-4d %9.4f s", shape_name, r, basis_s);
          if (cpu.has_value()) {
            const double cpu_total = cpu->update_s + cpu->basis_s[r];
            const double gpu_total = update_s + basis_s;
            b["cpu_over_gpu_basis"] = cpu->basis_s[r] / basis_s;
            b["cpu_over_gpu_refresh"] = cpu_total / gpu_total;
            b["action_error_vs_cpu"] = errors[r];
            os << absl::StrFormat(
                " (CPU/GPU %.1fx); refresh (update + basis) CPU/GPU %.1fx; T(G) vs CPU basis %.2e",
                cpu->basis_s[r] / basis_s, cpu_total / gpu_total, errors[r]);
          }
          os << '\n';
        }
        shape_json["gpu"] = *std::move(gpu);
      } else {
        const absl::Status s = gpu.ok() ? compare : gpu.status();
        os << "GPU part failed: " << s.message() << '\n';
        shape_json["gpu"] = {{"ran", false}, {"error", std::string(s.message())}};
        if (gpu_status.ok()) {
          gpu_status = absl::Status(s.code(), absl::StrCat("GPU part, ", shape_name, ": ",
                                                           s.message()));
        }
      }
    }
#endif
    if (!gpu_skipped.empty()) shape_json["gpu"] = {{"ran", false}, {"skipped_reason", gpu_skipped}};
    doc["shapes"].push_back(std::move(shape_json));
  }
  GIFT_RETURN_IF_ERROR(sinks.WriteJson(doc));
  return gpu_status;
}

}  // namespace

Command AddRefreshCommand(CLI::App& parent) {
  auto options = std::make_shared<RefreshBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "refresh",
      "A basis refresh of one gradient (EMA step of both sides' statistics + the two-sided "
      "TensorBasis) on the CPU and, with --gpu, on the GPU (kernels/transform/refresh_cuda.h), "
      "with CPU/GPU ratios and the GPU basis's action against the CPU basis's.");
  app->add_option("--shapes", options->shapes,
                  "Comma-separated ROWSxCOLS (default: 4096x4096,4096x11008)")
      ->delimiter(',');
  app->add_option("--ranks", options->ranks, "Comma-separated ranks per side (default: 64,128)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app->add_option("--reps", options->reps, "GPU timed runs per measurement (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--cpu-max-dim", options->cpu_max_dim,
                  "Run the CPU refresh only where both dimensions are <= this (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app->add_option("--seed", options->seed, "Seed of the synthetic gradient")->capture_default_str();
  app->add_flag("--gpu", options->gpu, "Also time the GPU refresh (skipped without a device)");
  app->add_option("--json", options->json_path,
                  "Also write every number as JSON to FILE ('-' for stdout; the table then goes "
                  "to stderr)")
      ->type_name("FILE");
  return Command{app, [options] { return RunRefreshBench(*options); }};
}

absl::Status RunRefreshBench(const RefreshBenchOptions& options) { return Run(options); }

}  // namespace gift::bench
