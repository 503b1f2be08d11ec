// The baselines `gift-bench cluster` measures in the same run as the cluster
// (cluster_bench.h): ucx_perftest loopback bandwidth, the PyTorch gloo
// all-reduce of the same tensors, and the server's chunk reduction against
// memcpy. Each returns its part of the JSON report and its rows of the
// summary table; one that cannot run says why ("skipped") instead of failing
// the benchmark.
//
// Thread safety: plain functions; each runs its baseline to completion.
#ifndef GIFT_BENCH_CLUSTER_BASELINES_H_
#define GIFT_BENCH_CLUSTER_BASELINES_H_

#include <ostream>
#include <string>
#include <vector>

#include "bench/cluster_bench.h"
#include "bench/synthetic_model.h"
#include "common/codec/codec_spec.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

// What the baselines are compared with: the cluster's push-pull.
struct PushPullThroughput {
  double fp32_gbps = 0;             // FP32 gradient bytes / the slowest median step
  double wire_gbps = 0;             // bytes pushed / the same step
  double bytes_pushed_per_step = 0;  // by one worker
  double fp32_bytes_per_step = 0;    // per worker
};

struct BaselineReport {
  nlohmann::json json;                     // {"ran": bool, ...} or {"skipped": why}
  std::vector<std::string> summary_lines;  // none when the baseline is off
};

// ucx_perftest tag_bw (--perftest-bin, UCX_TLS as the cluster's) at the size
// of one chunk pushed with `push` and at the bytes one worker pushes per
// step, with the push-pull / perftest ratios.
BaselineReport PerftestBaseline(const ClusterBenchOptions& o, const codec::CodecSpec& push,
                                const PushPullThroughput& pp);

// gloo all-reduce of `tensors` over --workers processes (bench/gloo_baseline.h),
// with the push-pull speedup; says on `os` that it runs (it takes a while).
BaselineReport GlooBaseline(const ClusterBenchOptions& o, const std::vector<ModelTensor>& tensors,
                            const PushPullThroughput& pp, std::ostream& os);

// server::ChunkReducer taking --workers pushes of one --chunk-bytes chunk
// (bench/reducer_baseline.h), against memcpy of the same FP32 bytes.
BaselineReport ReducerBaseline(const ClusterBenchOptions& o, const codec::CodecSpec& push,
                               const codec::CodecSpec& pull);

// num / den, or null when either is not positive (the report's ratios).
nlohmann::json Ratio(double num, double den);
// A ratio as the tables print it: "%.3f", or "-" for null.
std::string RatioText(const nlohmann::json& ratio);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CLUSTER_BASELINES_H_
