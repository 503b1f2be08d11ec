#include "bench/transform_bench.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
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
#include "bench/plain_blas_forward.h"
#include "bench/synthetic_basis.h"
#include "bench/transform_bench_cuda.h"
#include "common/base/relative_error.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/transform/blas_runtime.h"
#include "common/transform/dense_whitening_transform.h"
#include "common/transform/encoder_pipeline.h"
#include "common/transform/low_rank_eigen.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_fp32.h"
#include "common/transform/tensor_basis_transform.h"

namespace gift::bench {
namespace {

using transform::TensorBasis;

constexpr double kGpuForwardEncodeTarget = 1.5;  // transform + quantize / direct quantize, at most
constexpr double kCpuEncodeTarget = 6.0;  // CPU: forward + encode / direct encode, at most
constexpr double kCpuPlainTarget = 1.5;   // CPU: FP32 forward / plain-BLAS forward, at most

struct Shape {
  int64_t d_out = 0;
  int64_t d_in = 0;
};

absl::StatusOr<Shape> ParseShape(const std::string& text) {
  GIFT_ASSIGN_OR_RETURN(const MatrixShape s, ParseMatrixShape(text, int64_t{1} << 20));
  return Shape{.d_out = s.rows, .d_in = s.cols};
}

// The dense factor U diag(lam) U^T + sigma (I - U U^T) of the same synthetic
// eigenpairs, for DenseWhiteningTransform.
Eigen::MatrixXd DenseFactor(int64_t n, int64_t r, uint64_t seed) {
  const transform::LowRankEigenpairs eig = SyntheticEigenpairs(n, r, seed);
  const double sigma = r == n ? 0.0 : (eig.trace - eig.values.sum()) / static_cast<double>(n - r);
  Eigen::MatrixXd a =
      eig.vectors * (eig.values.array() - sigma).matrix().asDiagonal() * eig.vectors.transpose();
  a.diagonal().array() += sigma;
  return a;
}

struct CpuTimes {
  Timing encode, forward_encode, decode, decode_inverse, forward, inverse, plain_forward;
  // The first chunk (one row block) encoded through the worker's pipeline,
  // from Prepare: the forward streamed by rows, and the whole forward first.
  Timing first_chunk_streamed, first_chunk_whole;
};

nlohmann::json TimingJson(const Timing& t) {
  return nlohmann::json{{"median_s", t.median_s}, {"samples_s", t.seconds}};
}

double Ratio(double a_s, double b_s) { return b_s > 0 ? a_s / b_s : 0.0; }
double Ratio(const Timing& a, const Timing& b) { return Ratio(a.median_s, b.median_s); }

const char* Verdict(bool pass) { return pass ? "PASS" : "MISS"; }

// One measurement of TimeInterleaved: where its timing goes, and what it runs.
struct Timed {
  Timing* timing;
  std::function<absl::Status()> fn;
};

// TimeRuns for several functions at once, round-robin (one untimed warm-up
// round, then `reps` rounds of one call each), so that the ratios between
// them see the same load on a shared machine.
absl::Status TimeInterleaved(int reps, const std::vector<Timed>& timed) {
  for (const Timed& x : timed) {
    GIFT_RETURN_IF_ERROR(x.fn());
    x.timing->seconds.clear();
  }
  for (int r = 0; r < reps; ++r) {
    for (const Timed& x : timed) {
      const auto start = std::chrono::steady_clock::now();
      GIFT_RETURN_IF_ERROR(x.fn());
      const auto stop = std::chrono::steady_clock::now();
      x.timing->seconds.push_back(std::chrono::duration<double>(stop - start).count());
    }
  }
  for (const Timed& x : timed) x.timing->median_s = Median(x.timing->seconds);
  return absl::OkStatus();
}

// The CPU rows of one shape, on each thread count (the codec's pool and the
// process's BLAS threads both set to it): direct and transformed paths, the
// FP32 transform alone against the plain-BLAS baseline (plain_blas_forward.h)
// with GFLOP/s, the double reference, and the dense form where affordable.
absl::Status RunCpuShape(const TransformBenchOptions& options, const codec::CodecSpec& spec,
                         const Shape& s, const TensorBasis& basis, const std::vector<float>& g,
                         ThreadPool* pool, const std::vector<int>& thread_counts, std::ostream& os,
                         nlohmann::json& shape_json) {
  const codec::RngKey key{.tensor = 1, .step = 0, .rank = 0};
  const uint64_t rows = static_cast<uint64_t>(s.d_out), cols = static_cast<uint64_t>(s.d_in);
  std::vector<float> work(rows * cols), ours(rows * cols), plain_out(rows * cols),
      reference(rows * cols);
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor enc, codec::EncodedTensor::Create(spec, rows, cols));
  GIFT_RETURN_IF_ERROR(basis.Forward(g.data(), s.d_out, s.d_in, ours.data()));
  GIFT_RETURN_IF_ERROR(codec::Encode(ours.data(), enc.mutable_view(), key, {}));
  // The baseline exists for sides of rank < n (the bench's basis unless
  // --rank covers a whole dimension).
  absl::StatusOr<PlainBlasForward> plain = PlainBlasForward::Create(basis);
  // Nominal flops of either forward: 2 d_out d_in (r_out + r_in) for the
  // skinny products plus as many for the updates.
  const double k = static_cast<double>(basis.output_side()->rank() + basis.input_side()->rank());
  const double flops = 4.0 * static_cast<double>(rows) * static_cast<double>(cols) * k;
  auto gflops = [&](const Timing& t) { return t.median_s > 0 ? flops / t.median_s * 1e-9 : 0.0; };
  // The worker's encoder pipeline over the same basis, and its first chunk:
  // one block of rows (the streamed forward's unit).
  GIFT_ASSIGN_OR_RETURN(
      transform::EncoderPipeline pipeline,
      transform::EncoderPipeline::Create(std::make_shared<transform::TensorBasisTransform>(basis),
                                         {.spec = spec}));
  const uint64_t first_rows =
      std::min<uint64_t>(rows, static_cast<uint64_t>(transform::TensorBasisFp32::kRowBlock));
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor first,
                        codec::EncodedTensor::Create(spec, first_rows, cols));

  os << absl::StrFormat("%-10s %-30s %11s %9s %9s\n", "CPU", "operation", "ms", "x direct",
                        "GFLOP/s");
  shape_json["cpu"] = nlohmann::json::array();
  const int blas_threads_before = transform::BlasThreads();
  for (int threads : thread_counts) {
    GIFT_RETURN_IF_ERROR(transform::SetBlasThreads(threads));
    const codec::CodecOptions copts{.pool = threads > 1 ? pool : nullptr, .use_simd = true};
    CpuTimes t;
    std::vector<Timed> timed = {
        {&t.encode, [&] { return codec::Encode(g.data(), enc.mutable_view(), key, copts); }},
        {&t.forward_encode,
         [&] {
           GIFT_RETURN_IF_ERROR(basis.Forward(g.data(), s.d_out, s.d_in, work.data()));
           return codec::Encode(work.data(), enc.mutable_view(), key, copts);
         }},
        {&t.decode, [&] { return codec::Decode(enc.view(), work.data(), copts); }},
        {&t.decode_inverse,
         [&] {
           GIFT_RETURN_IF_ERROR(codec::Decode(enc.view(), work.data(), copts));
           return basis.Inverse(work.data(), s.d_out, s.d_in, work.data());
         }},
        {&t.forward, [&] { return basis.Forward(g.data(), s.d_out, s.d_in, work.data()); }},
        {&t.inverse, [&] { return basis.Inverse(ours.data(), s.d_out, s.d_in, work.data()); }},
    };
    // What a tensor's first chunk waits for before it can go on the wire.
    auto first_chunk = [&](bool whole) -> absl::Status {
      GIFT_ASSIGN_OR_RETURN(const float* x, pipeline.Prepare(g.data(), work.data()));
      if (whole) GIFT_RETURN_IF_ERROR(pipeline.PrepareRange(0, rows * cols));
      return pipeline.EncodeChunk(x, 0, first.mutable_view(), key);
    };
    timed.push_back({&t.first_chunk_streamed, [&] { return first_chunk(false); }});
    timed.push_back({&t.first_chunk_whole, [&] { return first_chunk(true); }});
    if (plain.ok()) {
      timed.push_back({&t.plain_forward, [&] {
                         plain->Forward(g.data(), plain_out.data());
                         return absl::OkStatus();
                       }});
    }
    GIFT_RETURN_IF_ERROR(TimeInterleaved(options.reps, timed));
    const std::string label = absl::StrCat(threads, threads == 1 ? " thread" : " threads");
    auto line = [&](const char* op, const Timing& x, const Timing& base, bool with_gflops) {
      WriteLine(os, absl::StrFormat("%-10s %-30s %11.3f %8.2fx %9s", label, op, x.median_s * 1e3,
                                    Ratio(x, base),
                                    with_gflops ? absl::StrFormat("%.1f", gflops(x)) : ""));
    };
    line("encode (direct)", t.encode, t.encode, false);
    line("forward + encode", t.forward_encode, t.encode, false);
    line("decode (direct)", t.decode, t.decode, false);
    line("decode + inverse", t.decode_inverse, t.decode, false);
    line("forward alone (FP32 BLAS)", t.forward, t.encode, true);
    line("inverse alone (FP32 BLAS)", t.inverse, t.decode, true);
    line("1st chunk, whole forward", t.first_chunk_whole, t.encode, false);
    line("1st chunk, streamed forward", t.first_chunk_streamed, t.encode, false);
    nlohmann::json row = {{"threads", threads},
                          {"blas_threads", transform::BlasThreads()},
                          {"encode", TimingJson(t.encode)},
                          {"forward_encode", TimingJson(t.forward_encode)},
                          {"decode", TimingJson(t.decode)},
                          {"decode_inverse", TimingJson(t.decode_inverse)},
                          {"forward", TimingJson(t.forward)},
                          {"inverse", TimingJson(t.inverse)},
                          {"first_chunk_rows", first_rows},
                          {"first_chunk_whole_forward", TimingJson(t.first_chunk_whole)},
                          {"first_chunk_streamed_forward", TimingJson(t.first_chunk_streamed)},
                          {"forward_gflops", gflops(t.forward)},
                          {"inverse_gflops", gflops(t.inverse)},
                          {"forward_encode_over_encode", Ratio(t.forward_encode, t.encode)},
                          {"decode_inverse_over_decode", Ratio(t.decode_inverse, t.decode)}};
    const double fe = Ratio(t.forward_encode, t.encode);
    std::string targets = absl::StrFormat("forward + encode <= %.1fx encode: %.2fx %s",
                                          kCpuEncodeTarget, fe, Verdict(fe <= kCpuEncodeTarget));
    if (plain.ok()) {
      line("plain BLAS forward (unfused)", t.plain_forward, t.encode, true);
      const double vs_plain = Ratio(t.forward, t.plain_forward);
      absl::StrAppend(&targets,
                      absl::StrFormat("; forward <= %.1fx plain BLAS: %.2fx %s", kCpuPlainTarget,
                                      vs_plain, Verdict(vs_plain <= kCpuPlainTarget)));
      row["plain_blas_forward"] = TimingJson(t.plain_forward);
      row["plain_blas_forward_gflops"] = gflops(t.plain_forward);
      row["forward_over_plain_blas"] = vs_plain;
    }
    WriteLine(os, absl::StrFormat("%-10s target (CPU): %s", label, targets));
    os.flush();
    shape_json["cpu"].push_back(std::move(row));
  }
  GIFT_RETURN_IF_ERROR(transform::SetBlasThreads(blas_threads_before));

  // The double reference (single-threaded), and the FP32 path's error
  // against it beside its stated bound; the baseline's too.
  GIFT_ASSIGN_OR_RETURN(const Timing ref_fwd, TimeRuns(1, [&] {
                          return basis.Forward(g.data(), s.d_out, s.d_in, reference.data(),
                                               transform::Precision::kFp64Reference);
                        }));
  const double encode_one_thread_s = shape_json["cpu"][0]["encode"]["median_s"].get<double>();
  const double err = RelativeL2(ours, reference);
  WriteLine(os, absl::StrFormat("%-10s %-30s %11.3f %8.2fx %9.1f", "1 thread",
                                "forward, double reference", ref_fwd.median_s * 1e3,
                                Ratio(ref_fwd.median_s, encode_one_thread_s), gflops(ref_fwd)));
  os << absl::StrFormat(
      "FP32 forward vs double reference: relative L2 %.3g (stated bound %.3g)%s\n", err,
      basis.Fp32ErrorBound(),
      plain.ok() ? absl::StrFormat("; plain BLAS %.3g", RelativeL2(plain_out, reference)) : "");
  shape_json["cpu_reference_forward"] = TimingJson(ref_fwd);
  shape_json["fp32_forward_error"] = err;
  shape_json["fp32_error_bound"] = basis.Fp32ErrorBound();
  if (!plain.ok()) shape_json["plain_blas_skipped"] = std::string(plain.status().message());

  // The published dense form on the CPU, where it is affordable.
  if (s.d_in <= options.dense_max_din) {
    const int64_t r = std::min(options.rank, s.d_in);
    GIFT_ASSIGN_OR_RETURN(const transform::DenseWhiteningTransform dense,
                          transform::DenseWhiteningTransform::Create(
                              DenseFactor(s.d_in, r, options.seed + 1), r, s.d_out));
    GIFT_ASSIGN_OR_RETURN(const Timing dense_fwd, TimeRuns(1, [&] {
                            return dense.Forward(g.data(), s.d_out, s.d_in, work.data());
                          }));
    WriteLine(os, absl::StrFormat("%-10s %-30s %11.3f %8.2fx", "1 thread",
                                  "dense whitening forward", dense_fwd.median_s * 1e3,
                                  Ratio(dense_fwd.median_s, encode_one_thread_s)));
    shape_json["cpu_dense_forward"] = TimingJson(dense_fwd);
  } else {
    os << absl::StrFormat(
        "(CPU dense whitening skipped: d_in %d > --dense-max-din %d; it costs O(d_out d_in^2))\n",
        s.d_in, options.dense_max_din);
    shape_json["cpu_dense_forward"] = {{"skipped", true}};
  }
  return absl::OkStatus();
}

absl::Status Run(const TransformBenchOptions& options) {
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  if (options.reps < 1 || options.rank < 1 || !(options.power > 0) ||
      !std::isfinite(options.power)) {
    return absl::InvalidArgumentError("--reps and --rank must be >= 1 and --power finite > 0");
  }
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec spec, codec::ParseCodecSpec(options.spec));
  const std::vector<std::string> shape_names =
      options.shapes.empty() ? std::vector<std::string>{"1280x3456", "3456x1280", "4096x4096"}
                             : options.shapes;
  std::vector<Shape> shapes;
  for (const std::string& name : shape_names) {
    GIFT_ASSIGN_OR_RETURN(Shape s, ParseShape(name));
    shapes.push_back(s);
  }

  const int hw_threads = HardwareThreads();
  const int all_threads = options.threads > 0 ? options.threads : hw_threads;
  std::unique_ptr<ThreadPool> pool;
  if (all_threads > 1) pool = std::make_unique<ThreadPool>(all_threads - 1);
  std::vector<int> thread_counts = {1};
  if (all_threads > 1) thread_counts.push_back(all_threads);

  std::string gpu_skipped;
#ifdef GIFT_BENCH_WITH_CUDA
  gpu_skipped = options.gpu ? GpuUnavailableReason() : "--no-gpu was given";
#else
  gpu_skipped = "gift-bench was built without CUDA (GIFT_HAVE_CUDA is off)";
#endif

  os << absl::StrFormat(
      "gift-bench transform: two-sided isotropic TensorBasis, rank %d, p = %g, codec %s; median "
      "of %d runs after 1 warm-up (the CPU rows of a thread count interleaved round-robin)\nCPU: "
      "on 1 and %d threads (%d hardware threads): the codec "
      "on its pool, TensorBasis's FP32 SGEMMs on as many BLAS threads; BLAS: %s\n",
      options.rank, options.power, codec::ToString(spec), options.reps, all_threads, hw_threads,
      transform::BlasLibrary());
  os.flush();

  nlohmann::json doc;
  doc["command"] = "transform";
  doc["config"] = {{"shapes", shape_names},
                   {"rank", options.rank},
                   {"power", options.power},
                   {"sides", "both"},
                   {"residual", "isotropic"},
                   {"spec", codec::ToString(spec)},
                   {"reps", options.reps},
                   {"warmup_runs", 1},
                   {"hardware_threads", hw_threads},
                   {"threads_measured", thread_counts},
                   {"blas_library", transform::BlasLibrary()},
                   {"cpu_target_forward_encode_over_encode", kCpuEncodeTarget},
                   {"cpu_target_forward_over_plain_blas", kCpuPlainTarget},
                   {"dense_max_din", options.dense_max_din},
                   {"seed", options.seed}};
  doc["shapes"] = nlohmann::json::array();
  absl::Status gpu_status = absl::OkStatus();

  for (const Shape& s : shapes) {
    const std::string shape_name = absl::StrCat(s.d_out, "x", s.d_in);
    const uint64_t rows = static_cast<uint64_t>(s.d_out), cols = static_cast<uint64_t>(s.d_in);
    GIFT_ASSIGN_OR_RETURN(const TensorBasis basis, MakeSyntheticBasis(s.d_out, s.d_in, options.rank,
                                                                      options.power, options.seed));
    const std::vector<float> g = MakeGradientLikeInput(rows, cols, options.seed, pool.get());

    os << absl::StrFormat("\n== %s ==\n", shape_name);
    nlohmann::json shape_json = {{"shape", shape_name}, {"d_out", s.d_out}, {"d_in", s.d_in}};
    if (options.cpu) {
      GIFT_RETURN_IF_ERROR(
          RunCpuShape(options, spec, s, basis, g, pool.get(), thread_counts, os, shape_json));
    } else {
      os << "(CPU timings skipped: --no-cpu)\n";
    }
    os.flush();

    // ---- GPU ----------------------------------------------------------------------
    if (gpu_skipped.empty()) {
#ifdef GIFT_BENCH_WITH_CUDA
      // The CPU's double-precision result, for the GPU's error.
      std::vector<float> cpu_forward(rows * cols);
      GIFT_RETURN_IF_ERROR(basis.Forward(g.data(), s.d_out, s.d_in, cpu_forward.data(),
                                         transform::Precision::kFp64Reference));
      GpuTransformShapeConfig gc;
      gc.spec = spec;
      gc.basis = &basis;
      gc.input = &g;
      gc.cpu_forward = &cpu_forward;
      gc.reps = options.reps;
      absl::StatusOr<nlohmann::json> gpu = RunGpuTransformShape(gc, os);
      if (gpu.ok()) {
        shape_json["gpu"] = *std::move(gpu);
        const double fp32 = shape_json["gpu"]["forward_encode_over_encode_fp32"].get<double>();
        const double tf32 = shape_json["gpu"]["forward_encode_over_encode_tf32"].get<double>();
        os << absl::StrFormat(
            "target (GPU): forward + encode <= %.1fx encode: FP32 GEMMs %.2fx %s, TF32 GEMMs "
            "%.2fx %s\n",
            kGpuForwardEncodeTarget, fp32, fp32 <= kGpuForwardEncodeTarget ? "PASS" : "MISS", tf32,
            tf32 <= kGpuForwardEncodeTarget ? "PASS" : "MISS");
      } else {
        os << "GPU part failed: " << gpu.status().message() << '\n';
        shape_json["gpu"] = {{"ran", false}, {"error", std::string(gpu.status().message())}};
        if (gpu_status.ok()) {
          gpu_status =
              absl::Status(gpu.status().code(),
                           absl::StrCat("GPU part, ", shape_name, ": ", gpu.status().message()));
        }
      }
#endif
    } else {
      os << "GPU part skipped: " << gpu_skipped << '\n';
      shape_json["gpu"] = {{"ran", false}, {"skipped_reason", gpu_skipped}};
    }
    os.flush();
    doc["shapes"].push_back(std::move(shape_json));
  }
  doc["gpu_target_forward_encode_over_encode"] = kGpuForwardEncodeTarget;
  GIFT_RETURN_IF_ERROR(sinks.WriteJson(doc));
  return gpu_status;
}

}  // namespace

Command AddTransformCommand(CLI::App& parent) {
  auto options = std::make_shared<TransformBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "transform",
      "Transform + quantize against direct quantize (and dequantize + inverse against "
      "dequantize) with a two-sided low-rank TensorBasis, on the CPU and on the GPU when one is "
      "present, with the published dense form for reference. Reports the CPU targets "
      "forward + encode <= 6x encode and FP32 forward <= 1.5x a plain-BLAS forward, and the GPU "
      "target forward + encode <= 1.5x encode; misses do not fail.");
  app->add_option("--shapes", options->shapes,
                  "Comma-separated ROWSxCOLS (default: 1280x3456,3456x1280,4096x4096)")
      ->delimiter(',');
  app->add_option("--rank", options->rank, "Rank r of each side's basis")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app->add_option("--power", options->power, "Power p of the transform")
      ->check(PositiveNumber())
      ->capture_default_str();
  app->add_option("--spec", options->spec, "Codec spec")
      ->check(CodecSpecValidator())
      ->capture_default_str();
  app->add_option("--reps", options->reps, "Timed runs per measurement (median reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--threads", options->threads,
                  "Threads of the all-threads measurement: the codec's pool and the BLAS threads "
                  "(default: hardware threads, " +
                      std::to_string(HardwareThreads()) + " here)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--dense-max-din", options->dense_max_din,
                  "Run the CPU dense whitening reference only where d_in <= this (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app->add_option("--seed", options->seed, "Seed of the synthetic input and basis")
      ->capture_default_str();
  app->add_flag("!--no-cpu", options->cpu, "Skip the CPU timings");
  app->add_flag("!--no-gpu", options->gpu, "Skip the GPU part");
  app->add_option("--json", options->json_path,
                  "Also write every number as JSON to FILE ('-' for stdout; the table then goes "
                  "to stderr)")
      ->type_name("FILE");
  return Command{app, [options] { return RunTransformBench(*options); }};
}

absl::Status RunTransformBench(const TransformBenchOptions& options) { return Run(options); }

}  // namespace gift::bench
