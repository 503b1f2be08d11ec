// `gift-bench model`: predicted step time of data-parallel training with the
// gradients averaged by ring all-reduces (FP32, BF16, FP8 as NCCL does it)
// or by the GIFT-PS service (FP32, direct low precision, GIFT), from the
// arithmetic of bench/step_model.h. Nothing is measured here: the per-op
// costs come from the JSON of `gift-bench codec/transform/cluster` runs
// (--costs), from flags, or from a labelled HBM-bandwidth assumption
// (--hbm-gbyte); every input is echoed in the table's header and the JSON.
//
// For each GPU count (--gpus) and server count (--servers; 0 = the fewest
// whose NICs and reduce keep up with the workers' links, --max-servers when
// none does) it prints one row
// per method: bytes per GPU and per server, time per phase, exposed
// communication, step, and the speedup against each ring; then the server
// sizing of each service method. Node-local aggregation (--hierarchy node)
// is modelled only: the service has no such feature yet.
#ifndef GIFT_BENCH_MODEL_BENCH_H_
#define GIFT_BENCH_MODEL_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct ModelBenchOptions {
  // The model: a tensor list (`gift-bench cluster --list-tensors`), or
  // Llama-style blocks.
  std::string tensors_json;
  int64_t d_model = 512;
  int layers = 0;        // 0: from --params
  double params = 0;     // parameter count, with layers 0
  double ffn_mult = 2.75;
  int64_t vocab = 0;
  // The cluster.
  std::vector<int> gpus = {4};
  int gpus_per_node = 1;
  double link_gbit = 1;
  double link_latency_us = 0;
  double link_efficiency = 1;
  double nvlink_gbyte = 150;
  double nvlink_latency_us = 0;
  std::vector<int> servers = {0};
  double server_gbit = 0;  // 0: the link's
  // Codecs and the transform.
  std::string push_codec = "e4m3/block128";
  std::string pull_codec = "bf16";
  int rank = 64;
  std::vector<std::string> transform_only;  // name substrings; empty: every 2-D tensor
  std::vector<std::string> methods = {"fp32-ring", "bf16-ring", "fp8-ring",
                                      "fp32-service", "direct", "gift"};
  std::vector<std::string> hierarchy = {"none"};
  double push_pull_overlap = 0;
  // Compute.
  double forward_ms = 0, backward_ms = 0;
  double tokens_per_gpu = 0, mfu = 0.4, peak_tflops = 989;  // used when forward/backward are 0
  double backward_overlap = 0;
  double bucket_mib = 0;
  bool ops_on_compute = false;
  double ops_overlap = 0;
  // Per-op costs: measured JSON, then flags (GB/s of FP32; < 0 = not set).
  std::vector<std::string> costs;
  int costs_threads = 0;  // codec/transform rows at this thread count (0: the largest)
  double encode_gbps = -1, decode_gbps = -1, reduce_gbps = -1, server_encode_gbps = -1;
  double ring_reduce_gbps = -1, transform_gflops = -1;
  double hbm_gbyte = 0;         // > 0: HBM-bound estimates for unset worker op rates
  double hbm_efficiency = 0.7;  // fraction of HBM bandwidth those estimates get
  double worker_contention = 1, server_contention = 1;
  // Sizing and output.
  double target_tolerance = 0.01;
  int max_servers = 0;  // 0: the largest GPU count
  std::string json_path;
};

// Registers `model` on `parent`.
Command AddModelCommand(CLI::App& parent);

absl::Status RunModelBench(const ModelBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_MODEL_BENCH_H_
