#include "bench/codec_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/codec_bench_cuda.h"
#include "bench/codec_ops.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec.h"
#include "common/codec/reduce.h"

namespace gift::bench {
namespace {

// The default rows: DefaultCodecSpecs() plus the exact FP32 passthrough
// ("fp32", a copy: the baseline the compressed rows are measured against).
const std::vector<std::string>& CodecBenchDefaultSpecs() {
  static const auto* specs = [] {
    auto* v = new std::vector<std::string>(DefaultCodecSpecs());
    v->push_back("fp32");
    return v;
  }();
  return *specs;
}

constexpr double kCpuEncodeTarget = 0.5;  // x memcpy's input rate, thread for thread
constexpr double kMiB = 1024.0 * 1024.0;

// One column group of the table: a thread count and the pool that gives it.
struct ThreadConfig {
  int threads = 1;
  ThreadPool* pool = nullptr;  // null: the calling thread only
  Timing memcpy;               // the baseline for this thread count
};

std::string ThreadsLabel(int threads) {
  return absl::StrCat(threads, threads == 1 ? " thread" : " threads");
}

// memcpy of n floats, on the calling thread or split across the pool in
// page-aligned chunks (a few per thread, claimed dynamically).
absl::StatusOr<Timing> TimeMemcpy(const float* src, float* dst, size_t n, const ThreadConfig& tc,
                                  int reps) {
  if (tc.pool == nullptr) {
    return TimeRuns(reps, [&] {
      std::memcpy(dst, src, n * sizeof(float));
      return absl::OkStatus();
    });
  }
  constexpr size_t kAlign = 1024;  // floats: 4 KiB
  const size_t chunks = static_cast<size_t>(tc.threads) * 4;
  size_t chunk = (n + chunks - 1) / chunks;
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  const size_t num_chunks = (n + chunk - 1) / chunk;
  return TimeRuns(reps, [&] {
    ParallelFor(tc.pool, num_chunks, [&](size_t c) {
      const size_t begin = c * chunk;
      const size_t len = std::min(n, begin + chunk) - begin;
      std::memcpy(dst + begin, src + begin, len * sizeof(float));
    });
    return absl::OkStatus();
  });
}

// Buffers for one spec: the codec writes into these while being timed.
struct SpecBuffers {
  codec::EncodedTensor encoded;
  codec::EncodedTensor reduced;
  std::vector<codec::EncodedTensor> reduce_inputs;
  std::vector<codec::EncodedView> reduce_views;
};

absl::StatusOr<Timing> TimeCodecOp(CodecOp op, const std::vector<float>& x, SpecBuffers& b,
                                   std::vector<float>& out, std::vector<float>& acc,
                                   std::vector<float>& sum, int reduce_inputs,
                                   const codec::CodecOptions& opts, int reps) {
  const codec::RngKey key{.tensor = 1, .step = 0, .rank = 0};
  switch (op) {
    case CodecOp::kEncode:
      return TimeRuns(reps,
                      [&] { return codec::Encode(x.data(), b.encoded.mutable_view(), key, opts); });
    case CodecOp::kDecode:
      return TimeRuns(reps, [&] { return codec::Decode(b.encoded.view(), out.data(), opts); });
    case CodecOp::kDecodeAccumulate:
      // acc grows by about |x| per call; a few dozen calls stay far from overflow.
      std::copy(x.begin(), x.end(), acc.begin());
      return TimeRuns(reps,
                      [&] { return codec::DecodeAccumulate(b.encoded.view(), acc.data(), opts); });
    case CodecOp::kReduce:
      return TimeRuns(reps, [&] {
        return codec::ReduceEncoded(b.reduce_views, sum.data(), 1.0f / reduce_inputs,
                                    b.reduced.mutable_view(), key, opts);
      });
  }
  return absl::InternalError("unknown operation");
}

// How much faster all threads run a compute-only loop (no memory traffic)
// than one thread does: 2 on a machine that gives two threads two whole
// cores, about 1 where they share one. Median of three tries.
double ComputeScaling(const ThreadConfig& all) {
  constexpr uint64_t kTotalSteps = uint64_t{1} << 25;
  const size_t chunks = static_cast<size_t>(all.threads) * 8;
  std::vector<uint64_t> out(chunks);
  auto chunk_work = [&](size_t c) {
    uint64_t h = c + 1;
    for (uint64_t i = 0; i < kTotalSteps / chunks; ++i) {
      h ^= h << 13;
      h ^= h >> 7;
      h ^= h << 17;
    }
    out[c] = h;  // keeps the loop alive
  };
  absl::StatusOr<Timing> one = TimeRuns(3, [&] {
    for (size_t c = 0; c < chunks; ++c) chunk_work(c);
    return absl::OkStatus();
  });
  absl::StatusOr<Timing> many = TimeRuns(3, [&] {
    ParallelFor(all.pool, chunks, chunk_work);
    return absl::OkStatus();
  });
  if (!one.ok() || !many.ok() || many->median_s <= 0) return 0;
  return one->median_s / many->median_s;
}

nlohmann::json TimingJson(const Timing& t) {
  return nlohmann::json{{"median_s", t.median_s}, {"samples_s", t.seconds}};
}

std::string RatesCells(const Rates& r) {
  return absl::StrFormat("%9.3f %8.2f %8.2f %6.2fx", r.median_s * 1e3, r.input_gbps,
                         r.effective_gbps, r.input_ratio);
}

absl::Status Run(const CodecBenchOptions& options) {
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  const std::vector<std::string>& spec_names =
      options.specs.empty() ? CodecBenchDefaultSpecs() : options.specs;
  GIFT_ASSIGN_OR_RETURN(std::vector<codec::CodecSpec> specs, ParseSpecs(spec_names));
  if (!(options.mib > 0) || options.reps < 1 || options.reduce_inputs < 1 || options.cols < 1) {
    return absl::InvalidArgumentError("--mib, --reps, --inputs and --cols must be positive");
  }

  if (options.mib > 1024 * 1024) {
    return absl::InvalidArgumentError("--mib above 1 TiB is not a sensible benchmark size");
  }

  // ---- sizes, threads, data -------------------------------------------------
  const uint64_t cols = options.cols;
  const double want_elements = options.mib * kMiB / sizeof(float);
  const uint64_t rows =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(want_elements / cols)));
  const uint64_t n = rows * cols;
  const double fp32_bytes = 4.0 * static_cast<double>(n);

  const int hw_threads = HardwareThreads();
  const int all_threads = options.threads > 0 ? options.threads : hw_threads;
  // A pool of all_threads - 1 workers: the caller of ParallelFor is the last one.
  std::unique_ptr<ThreadPool> pool;
  if (all_threads > 1) pool = std::make_unique<ThreadPool>(all_threads - 1);

  std::vector<ThreadConfig> configs;
  configs.push_back(ThreadConfig{.threads = 1, .pool = nullptr, .memcpy = {}});
  if (all_threads > 1) {
    configs.push_back(ThreadConfig{.threads = all_threads, .pool = pool.get(), .memcpy = {}});
  }

  os << absl::StrFormat(
      "gift-bench codec: %.1f MiB of FP32 input = %d x %d elements; median of %d runs after "
      "1 warm-up; reduce sums %d inputs\n",
      fp32_bytes / kMiB, rows, cols, options.reps, options.reduce_inputs);
  os << absl::StrFormat("machine: %d hardware threads (measuring %s), AVX2 loops: %s\n", hw_threads,
                        all_threads > 1 ? absl::StrCat("1 and ", all_threads, " threads")
                                        : std::string("1 thread only"),
                        !options.use_simd     ? "off (--no-simd)"
                        : codec::CpuHasAvx2() ? "yes"
                                              : "no (CPU lacks AVX2)");
  double scaling = 1.0;
  if (configs.size() > 1) {
    scaling = ComputeScaling(configs.back());
    os << absl::StrFormat(
        "CPU scaling: a compute-only loop runs %.2fx faster on %d threads than on 1 (ideal "
        "%d.00x)%s\n",
        scaling, all_threads, all_threads,
        scaling < 0.75 * all_threads
            ? "; the threads do not get whole cores here, so all-threads numbers are low"
            : "");
  }
  os.flush();

  const std::vector<float> x = MakeGradientLikeInput(rows, cols, options.seed, pool.get());
  std::vector<float> copy_dst(n), out(n), acc(n), sum(n);

  nlohmann::json doc;
  doc["command"] = "codec";
  doc["machine"] = {{"hardware_threads", hw_threads},
                    {"threads_measured", all_threads},
                    {"avx2", codec::CpuHasAvx2()},
                    {"use_simd", options.use_simd},
                    {"compute_scaling_all_threads", scaling}};
  doc["config"] = {{"mib", fp32_bytes / kMiB},
                   {"rows", rows},
                   {"cols", cols},
                   {"elements", n},
                   {"reps", options.reps},
                   {"warmup_runs", 1},
                   {"reduce_inputs", options.reduce_inputs},
                   {"seed", options.seed},
                   {"specs", spec_names}};
  nlohmann::json cpu_json;
  cpu_json["memcpy"] = nlohmann::json::array();
  cpu_json["ops"] = nlohmann::json::array();
  cpu_json["targets"] = nlohmann::json::array();

  // ---- memcpy baselines -------------------------------------------------------
  for (ThreadConfig& tc : configs) {
    GIFT_ASSIGN_OR_RETURN(tc.memcpy, TimeMemcpy(x.data(), copy_dst.data(), n, tc, options.reps));
    nlohmann::json j = TimingJson(tc.memcpy);
    j["threads"] = tc.threads;
    j["input_gbps"] = GigabytesPerSecond(fp32_bytes, tc.memcpy.median_s);
    j["effective_gbps"] = GigabytesPerSecond(2 * fp32_bytes, tc.memcpy.median_s);
    cpu_json["memcpy"].push_back(std::move(j));
  }

  // ---- the table ----------------------------------------------------------------
  os << "\nCPU codec. in = FP32 input GB/s (4n bytes / time, n = elements of one tensor, also "
        "for reduce);\neff = (bytes read + written) / time; x mcpy = input rate / memcpy's input "
        "rate at the same\nthread count. Times are medians.\n";
  std::string head1 = absl::StrFormat("%-16s %-10s", "", "");
  std::string head2 = absl::StrFormat("%-16s %-10s", "spec", "op");
  for (const ThreadConfig& tc : configs) {
    absl::StrAppend(&head1, absl::StrFormat(" | %-35s", ThreadsLabel(tc.threads)));
    absl::StrAppend(&head2, absl::StrFormat(" | %9s %8s %8s %7s", "ms", "in", "eff", "x mcpy"));
  }
  WriteLine(os, head1);
  WriteLine(os, head2);
  {
    std::string line = absl::StrFormat("%-16s %-10s", "(baseline)", "memcpy");
    for (const ThreadConfig& tc : configs) {
      const Rates r = ComputeRates(tc.memcpy.median_s, fp32_bytes, Traffic{fp32_bytes, fp32_bytes},
                                   tc.memcpy.median_s);
      absl::StrAppend(&line, " | ", RatesCells(r));
    }
    WriteLine(os, line);
    os.flush();
  }

  // encode ratio per spec and thread config, for the target block.
  std::vector<std::vector<double>> encode_ratio(specs.size(),
                                                std::vector<double>(configs.size(), 0.0));
  for (size_t s = 0; s < specs.size(); ++s) {
    const codec::CodecSpec& spec = specs[s];
    const std::string name = codec::ToString(spec);
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor encoded,
                          codec::EncodedTensor::Create(spec, rows, cols));
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor reduced,
                          codec::EncodedTensor::Create(spec, rows, cols));
    GIFT_ASSIGN_OR_RETURN(std::vector<codec::EncodedTensor> inputs,
                          MakeReduceInputs(spec, x, rows, cols, options.reduce_inputs, pool.get()));
    SpecBuffers b{std::move(encoded), std::move(reduced), std::move(inputs), {}};
    for (const codec::EncodedTensor& t : b.reduce_inputs) b.reduce_views.push_back(t.view());
    const codec::EncodedLayout layout = b.encoded.layout();

    for (CodecOp op : kAllCodecOps) {
      const Traffic traffic = TrafficOf(op, layout, options.reduce_inputs);
      std::string line = absl::StrFormat("%-16s %-10s", name, CodecOpName(op));
      for (size_t c = 0; c < configs.size(); ++c) {
        const ThreadConfig& tc = configs[c];
        const codec::CodecOptions opts{.pool = tc.pool, .use_simd = options.use_simd};
        absl::StatusOr<Timing> t =
            TimeCodecOp(op, x, b, out, acc, sum, options.reduce_inputs, opts, options.reps);
        if (!t.ok()) {
          return absl::Status(t.status().code(),
                              absl::StrCat(CodecOpName(op), " ", name, " on ",
                                           ThreadsLabel(tc.threads), ": ", t.status().message()));
        }
        const Rates r = ComputeRates(t->median_s, fp32_bytes, traffic, tc.memcpy.median_s);
        absl::StrAppend(&line, " | ", RatesCells(r));
        if (op == CodecOp::kEncode) encode_ratio[s][c] = r.input_ratio;
        nlohmann::json j = TimingJson(*t);
        j["spec"] = name;
        j["op"] = CodecOpName(op);
        j["threads"] = tc.threads;
        j["bytes_read"] = traffic.read;
        j["bytes_written"] = traffic.written;
        j["input_gbps"] = r.input_gbps;
        j["effective_gbps"] = r.effective_gbps;
        j["input_ratio_vs_memcpy"] = r.input_ratio;
        cpu_json["ops"].push_back(std::move(j));
      }
      WriteLine(os, line);
      os.flush();
    }
  }

  // ---- targets ------------------------------------------------------------------
  os << absl::StrFormat(
      "\nTarget: CPU encode >= %.2fx memcpy's input rate, thread for thread (a report, not a "
      "test)\n",
      kCpuEncodeTarget);
  std::string head = absl::StrFormat("%-16s", "spec");
  for (const ThreadConfig& tc : configs) {
    absl::StrAppend(&head, absl::StrFormat("  %-14s", ThreadsLabel(tc.threads)));
  }
  WriteLine(os, head);
  for (size_t s = 0; s < specs.size(); ++s) {
    const std::string name = codec::ToString(specs[s]);
    std::string line = absl::StrFormat("%-16s", name);
    for (size_t c = 0; c < configs.size(); ++c) {
      const double ratio = encode_ratio[s][c];
      const bool pass = ratio >= kCpuEncodeTarget;
      absl::StrAppend(&line, absl::StrFormat("  %5.2fx %-7s", ratio, pass ? "PASS" : "MISS"));
      cpu_json["targets"].push_back({{"spec", name},
                                     {"op", "encode"},
                                     {"threads", configs[c].threads},
                                     {"input_ratio_vs_memcpy", ratio},
                                     {"target", kCpuEncodeTarget},
                                     {"pass", pass}});
    }
    WriteLine(os, line);
  }
  doc["cpu"] = std::move(cpu_json);

  // ---- GPU ------------------------------------------------------------------------
  os << '\n';
  absl::Status gpu_status = absl::OkStatus();
  std::string skipped;
#ifdef GIFT_BENCH_WITH_CUDA
  if (!options.gpu) {
    skipped = "--no-gpu was given";
  } else {
    skipped = GpuUnavailableReason();
  }
  if (skipped.empty()) {
    GpuBenchConfig gc;
    gc.specs = specs;
    gc.input = &x;
    gc.rows = rows;
    gc.cols = cols;
    gc.reps = options.reps;
    gc.reduce_inputs = options.reduce_inputs;
    gc.pool = pool.get();
    gc.use_simd = options.use_simd;
    absl::StatusOr<nlohmann::json> gpu = RunGpuCodecBench(gc, os);
    if (gpu.ok()) {
      if (!(*gpu)["errors"].empty()) {
        gpu_status = absl::InternalError(
            absl::StrCat("GPU part: ", (*gpu)["errors"].size(),
                         " spec(s) failed; first: ", (*gpu)["errors"][0]["spec"].get<std::string>(),
                         ": ", (*gpu)["errors"][0]["error"].get<std::string>()));
      }
      doc["gpu"] = *std::move(gpu);
    } else {
      gpu_status =
          absl::Status(gpu.status().code(), absl::StrCat("GPU part: ", gpu.status().message()));
      os << "GPU part failed: " << gpu.status().message() << '\n';
      doc["gpu"] = {{"ran", false}, {"error", std::string(gpu.status().message())}};
    }
  }
#else
  skipped = "gift-bench was built without CUDA (GIFT_HAVE_CUDA is off)";
#endif
  if (!skipped.empty()) {
    os << "GPU part skipped: " << skipped << '\n';
    doc["gpu"] = {{"ran", false}, {"skipped_reason", skipped}};
  }
  os.flush();

  GIFT_RETURN_IF_ERROR(sinks.WriteJson(doc));
  return gpu_status;
}

}  // namespace

Command AddCodecCommand(CLI::App& parent) {
  auto options = std::make_shared<CodecBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "codec",
      "Throughput of encode, decode, decode-accumulate and reduce for each codec spec, on one "
      "thread and on all threads, against memcpy of the same FP32 input (and on the GPU when "
      "one is present). Reports the target CPU encode >= 0.5x memcpy; misses do not fail.");
  app->add_option("--specs", options->specs,
                  "Comma-separated codec specs, e.g. e4m3/tensor,nvfp4,e5m2/mx32/sr\n(default: " +
                      absl::StrJoin(CodecBenchDefaultSpecs(), ",") + ")")
      ->delimiter(',')
      ->check(CodecSpecValidator());
  app->add_option("--mib", options->mib, "FP32 input size in MiB (rounded up to whole rows)")
      ->check(PositiveNumber())
      ->capture_default_str();
  app->add_option("--cols", options->cols, "Columns of the input tensor (rows follow from --mib)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30))
      ->capture_default_str();
  app->add_option("--reps", options->reps, "Timed runs per measurement (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--inputs", options->reduce_inputs, "Encoded inputs summed by reduce")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--threads", options->threads,
                  "Threads of the all-threads measurement (default: hardware threads, " +
                      std::to_string(HardwareThreads()) + " here)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--seed", options->seed, "Seed of the synthetic input")->capture_default_str();
  app->add_flag("!--no-simd", options->use_simd, "Use the codec's scalar loops instead of AVX2");
  app->add_flag("!--no-gpu", options->gpu, "Skip the GPU part");
  app->add_option("--json", options->json_path,
                  "Also write every number as JSON to FILE ('-' for stdout; the table then goes "
                  "to stderr)")
      ->type_name("FILE");
  return Command{app, [options] { return Run(*options); }};
}

absl::Status RunCodecBench(const CodecBenchOptions& options) { return Run(options); }

}  // namespace gift::bench
