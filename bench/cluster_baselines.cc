#include "bench/cluster_baselines.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/gloo_baseline.h"
#include "bench/perftest_baseline.h"
#include "bench/reducer_baseline.h"
#include "common/base/status_macros.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/payload.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;

// Payload bytes of one chunk of `elements` FP32 values encoded with `spec`
// (1024-wide rows when they divide it, else one row).
absl::StatusOr<uint64_t> ChunkPayloadBytes(const codec::CodecSpec& spec, uint64_t elements) {
  const uint64_t cols = elements % 1024 == 0 ? 1024 : elements;
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                        codec::EncodedTensor::Create(spec, elements / cols, cols));
  const uint64_t dims[] = {elements / cols, cols};
  return codec::PayloadSize(t.view(), dims);
}

}  // namespace

json Ratio(double num, double den) {
  if (!(num > 0) || !(den > 0)) return nullptr;
  return num / den;
}

std::string RatioText(const json& r) {
  return r.is_number() ? absl::StrFormat("%.3f", r.get<double>()) : "-";
}

BaselineReport PerftestBaseline(const ClusterBenchOptions& o, const codec::CodecSpec& push,
                                const PushPullThroughput& pp) {
  BaselineReport report{.json = {{"ran", false}}};
  json& perftest = report.json;
  if (!o.perftest) {
    perftest["skipped"] = "--no-perftest";
    return report;
  }
  if (access(o.perftest_bin.c_str(), X_OK) != 0) {
    perftest["skipped"] = absl::StrCat(o.perftest_bin, " is not executable (Debian: ucx-utils)");
    report.summary_lines.push_back(absl::StrFormat("%-52s  skipped: %s", "ucx_perftest tag_bw",
                                                   perftest["skipped"].get<std::string>()));
    return report;
  }
  std::vector<PerftestResult> perf;
  const PerftestOptions perftest_options{
      .binary = o.perftest_bin, .ucx_tls = o.ucx_tls, .iterations = o.perftest_iters};
  absl::StatusOr<uint64_t> chunk = ChunkPayloadBytes(push, o.chunk_bytes / 4);
  if (chunk.ok()) perf.push_back(RunPerftest(perftest_options, "one pushed chunk", *chunk));
  if (pp.bytes_pushed_per_step > 0) {
    perf.push_back(RunPerftest(perftest_options, "bytes pushed per step",
                               static_cast<uint64_t>(pp.bytes_pushed_per_step)));
  }
  json results = json::array();
  for (const PerftestResult& p : perf) {
    json r = {{"label", p.label}, {"message_bytes", p.message_bytes}, {"iterations", p.iterations}};
    const std::string name =
        absl::StrCat("ucx_perftest tag_bw ", p.message_bytes, " B (", p.label, ")");
    if (p.bytes_per_s > 0) {
      r["gbps"] = p.bytes_per_s / 1e9;
      r["push_pull_fp32_ratio"] = Ratio(pp.fp32_gbps, p.bytes_per_s / 1e9);
      r["push_pull_wire_ratio"] = Ratio(pp.wire_gbps, p.bytes_per_s / 1e9);
      perftest["ran"] = true;
      report.summary_lines.push_back(absl::StrFormat(
          "%-52s  %10.3f  %10s  FP32 %s, wire %s", name, p.bytes_per_s / 1e9, "",
          RatioText(r["push_pull_fp32_ratio"]), RatioText(r["push_pull_wire_ratio"])));
    } else {
      r["error"] = p.error;
      report.summary_lines.push_back(absl::StrFormat("%-52s  failed: %s", name, p.error));
    }
    results.push_back(r);
  }
  perftest["tls"] = o.ucx_tls.empty() ? "(UCX's choice)" : o.ucx_tls;
  perftest["test"] = "tag_bw, 127.0.0.1, two processes";
  perftest["results"] = results;
  return report;
}

BaselineReport GlooBaseline(const ClusterBenchOptions& o, const std::vector<ModelTensor>& tensors,
                            const PushPullThroughput& pp, std::ostream& os) {
  BaselineReport report{.json = {{"ran", false}}};
  json& gloo = report.json;
  if (!o.gloo) {
    gloo["skipped"] = "--no-gloo";
    return report;
  }
  os << "\nrunning the gloo all-reduce baseline (" << o.workers << " processes)...\n" << std::flush;
  const GlooOptions gloo_options{.python = o.python,
                                 .script = o.gloo_script,
                                 .placement_file = o.placement_file,
                                 .world = o.workers,
                                 .mode = o.gloo_mode,
                                 .dtype = o.gloo_dtype};
  GlooResult g = RunGloo(gloo_options, tensors, o.steps, std::max(1, o.warmup));
  if (!g.ran) {
    gloo["skipped"] = g.skipped;
    report.summary_lines.push_back(
        absl::StrFormat("%-52s  skipped: %s", "gloo all-reduce", gloo.value("skipped", "")));
    return report;
  }
  gloo = g.report;
  gloo.erase("step_seconds");
  gloo["ran"] = true;
  gloo["median_step_s"] = g.median_s;
  gloo["p90_step_s"] = g.p90_s;
  gloo["gbps_fp32"] = GigabytesPerSecond(pp.fp32_bytes_per_step, g.median_s);
  gloo["push_pull_speedup"] =
      Ratio(pp.fp32_gbps, GigabytesPerSecond(pp.fp32_bytes_per_step, g.median_s));
  report.summary_lines.push_back(absl::StrFormat(
      "%-52s  %10.3f  %10.1f  %s",
      absl::StrCat("gloo all-reduce, ", o.workers, " procs (", gloo.value("mode", ""), ", ",
                   o.gloo_dtype, ")"),
      gloo["gbps_fp32"].get<double>(), 1e3 * gloo["median_step_s"].get<double>(),
      RatioText(gloo["push_pull_speedup"])));
  return report;
}

BaselineReport ReducerBaseline(const ClusterBenchOptions& o, const codec::CodecSpec& push,
                               const codec::CodecSpec& pull) {
  BaselineReport report{.json = {{"ran", false}}};
  if (!o.reducer) {
    report.json["skipped"] = "--no-reducer";
    return report;
  }
  absl::StatusOr<ReducerResult> rr = RunReducer({.chunk_bytes = o.chunk_bytes,
                                                 .workers = static_cast<uint32_t>(o.workers),
                                                 .reps = o.reducer_reps},
                                                push, pull);
  if (!rr.ok()) {
    report.json["skipped"] = rr.status().ToString();
    report.summary_lines.push_back(
        absl::StrFormat("server reduction: skipped: %s", report.json.value("skipped", "")));
    return report;
  }
  const ReducerResult& red = *rr;
  const double bytes = static_cast<double>(o.chunk_bytes);
  report.json = {
      {"ran", true},
      {"ranks", o.workers},
      {"chunk_shape", {red.rows, red.cols}},
      {"chunk_fp32_bytes", o.chunk_bytes},
      {"payload_bytes", red.payload_bytes},
      {"push_codec", codec::ToString(push)},
      {"pull_codec", codec::ToString(pull)},
      {"threads", 1},
      {"all_pushes_median_s", red.all_pushes_s},
      {"last_push_median_s", red.last_push_s},
      {"gbps_fp32_out", GigabytesPerSecond(bytes, red.all_pushes_s)},
      {"reduce_encode_gbps_fp32_out", GigabytesPerSecond(bytes, red.last_push_s)},
      {"memcpy_gbps", GigabytesPerSecond(bytes, red.memcpy_s)},
      {"ratio_to_memcpy", Ratio(GigabytesPerSecond(bytes, red.all_pushes_s),
                                GigabytesPerSecond(bytes, red.memcpy_s))}};
  std::vector<std::string>& lines = report.summary_lines;
  lines.push_back(absl::StrFormat(
      "\nserver reduction, one %llu x %llu chunk (%s -> %s), %d ranks, 1 thread:",
      static_cast<unsigned long long>(red.rows), static_cast<unsigned long long>(red.cols),
      codec::ToString(push), codec::ToString(pull), o.workers));
  lines.push_back(absl::StrFormat(
      "  %d placed pushes (checksum + parse in place; the last reduces and re-encodes into the "
      "send buffer): %.3f GB/s FP32 out (%.2f ms)",
      o.workers, GigabytesPerSecond(bytes, red.all_pushes_s), 1e3 * red.all_pushes_s));
  lines.push_back(absl::StrFormat("  the completing push alone: %.3f GB/s (%.2f ms)",
                                  GigabytesPerSecond(bytes, red.last_push_s),
                                  1e3 * red.last_push_s));
  lines.push_back(absl::StrFormat(
      "  memcpy of the same FP32 bytes: %.3f GB/s; reduction / memcpy = %s",
      GigabytesPerSecond(bytes, red.memcpy_s), RatioText(report.json["ratio_to_memcpy"])));
  return report;
}

}  // namespace gift::bench
