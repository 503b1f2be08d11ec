// `gift-bench gpu-share` (gpu_share_bench.h): the command line, option
// checks, the stop signals and the no-device answer; the roles themselves
// are in gpu_share_bench_cuda.cc.
#include "bench/gpu_share_bench.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"

#ifdef GIFT_BENCH_WITH_CUDA
#include "bench/codec_bench_cuda.h"
#include "bench/gpu_share_bench_cuda.h"
#endif

namespace gift::bench {
namespace {

// Set by SIGTERM / SIGINT: the role finishes its step, prints its summary
// and returns.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "g_stop is written by a signal handler");

// Installed only where gift-bench has CUDA (without it the roles refuse to run).
[[maybe_unused]] void OnStopSignal(int /*signal*/) {
  g_stop.store(true, std::memory_order_relaxed);
}

constexpr int kNoDeviceExitCode = 2;

absl::Status Validate(const GpuShareOptions& o) {
  if (o.role != "trainer" && o.role != "worker") {
    return absl::InvalidArgumentError("--role must be trainer or worker");
  }
  const bool trainer = o.role == "trainer";
  if (!o.priority.empty()) {
    const bool ok = trainer ? (o.priority == "normal" || o.priority == "highest")
                            : (o.priority == "lowest" || o.priority == "normal");
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("--priority for the ", o.role, " is ",
                       trainer ? "normal or highest" : "lowest or normal"));
    }
  }
  if (o.tokens < 1 || o.hidden < 1 || o.ffn < 1 || o.layers < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--tokens, --hidden, --ffn and --layers must be >= 1");
  }
  // cuBLAS takes int dimensions; 2F rows of dY must fit.
  if (o.tokens > (1 << 20) || o.hidden > (1 << 16) || o.ffn > (1 << 17)) {
    return absl::InvalidArgumentError("--tokens <= 2^20, --hidden <= 2^16, --ffn <= 2^17");
  }
  GIFT_ASSIGN_OR_RETURN(const MatrixShape shape,
                        ParseMatrixShape(o.shape, int64_t{1} << 16, int64_t{1} << 28));
  if (o.rank < 1 || o.rank > std::min(shape.rows, shape.cols)) {
    return absl::InvalidArgumentError("--rank must be in [1, min(rows, cols)] of --shape");
  }
  GIFT_RETURN_IF_ERROR(codec::ParseCodecSpec(o.spec).status());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGpuShare(const GpuShareOptions& options) {
  GIFT_RETURN_IF_ERROR(Validate(options));
#ifdef GIFT_BENCH_WITH_CUDA
  const std::string unavailable = GpuUnavailableReason();
  if (!unavailable.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", unavailable));
  }
  g_stop.store(false);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  return options.role == "trainer" ? RunGpuShareTrainer(options, g_stop, std::cout)
                                   : RunGpuShareWorker(options, g_stop, std::cout);
#else
  return absl::FailedPreconditionError(
      "no CUDA device: gift-bench was built without CUDA (GIFT_HAVE_CUDA is off)");
#endif
}

Command AddGpuShareCommand(CLI::App& parent) {
  auto options = std::make_shared<GpuShareOptions>();
  CLI::App* app = parent.add_subcommand(
      "gpu-share",
      "One side of the GPU-sharing measurement (scripts/gpu-share.sh runs both): --role trainer "
      "runs a backward pass's SGEMMs and prints its iteration times, --role worker runs the "
      "worker's forward + encode and decode + inverse on a low-priority stream and prints its "
      "throughput; JSON lines on stdout. Exit status 2 without a CUDA device.");
  app->add_option("--role", options->role, "trainer or worker")
      ->required()
      ->check(CLI::IsMember({"trainer", "worker"}));
  app->add_option("--seconds", options->seconds, "How long to run (default 10)")
      ->check(PositiveNumber());
  app->add_option("--report-every", options->report_every_s,
                  "Seconds between window lines (default 1)")
      ->check(PositiveNumber());
  app->add_option("--priority", options->priority,
                  "Stream priority: trainer normal (default) or highest; worker lowest (default, "
                  "as the worker daemon) or normal");
  app->add_flag("--tf32", options->tf32,
                "TF32 tensor-core products (the trainer's SGEMMs, the worker's transform GEMMs)");
  app->add_option("--tokens", options->tokens, "Trainer: rows of the activations (default 4096)");
  app->add_option("--hidden", options->hidden, "Trainer: model width H (default 4096)");
  app->add_option("--ffn", options->ffn, "Trainer: MLP width F (default 11008)");
  app->add_option("--layers", options->layers, "Trainer: layers per iteration (default 1)");
  app->add_option("--warmup", options->warmup, "Trainer: iterations not counted (default 2)");
  app->add_option("--shape", options->shape, "Worker: the tensor, ROWSxCOLS (default 4096x4096)");
  app->add_option("--rank", options->rank, "Worker: basis rank per side (default 32)");
  app->add_option("--spec", options->spec, "Worker: codec (default e4m3/block128)")
      ->check(CodecSpecValidator());
  app->add_option("--rate", options->rate, "Worker: steps per second; 0 (default): back to back")
      ->check(NonNegativeNumber());
  app->add_option("--seed", options->seed, "Worker: seed of the synthetic basis and tensor");
  Command command{app, [options] { return RunGpuShare(*options); }};
  command.exit_code = [](const absl::Status& status) {
    return status.code() == absl::StatusCode::kFailedPrecondition &&
                   status.message().rfind("no CUDA device", 0) == 0
               ? kNoDeviceExitCode
               : 1;
  };
  return command;
}

}  // namespace gift::bench
