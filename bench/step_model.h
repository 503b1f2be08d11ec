// An analytic step-time model of data-parallel training whose gradients are
// averaged either by a ring all-reduce (NCCL / gloo style) or by the GIFT-PS
// service (P workers push shards to S aggregator servers and pull the
// reduced shards back), with or without the GIFT transform. The arithmetic
// of `gift-bench model` (bench/model_bench.h); docs/scaling.md says what it
// predicts and how it was calibrated.
//
// Contract:
//   - Pure arithmetic: no I/O, no global state, no allocation beyond the
//     returned values; every function is thread-safe.
//   - Units are SI throughout: seconds, bytes, bytes per second (the CLI
//     converts Gbit/s and GB/s). "GB/s of FP32" rates are FP32 input bytes
//     (4 per element) processed per second.
//   - Bandwidths are per direction (full-duplex links): a host's tx and rx
//     run at the same time at the link's rate each.
//   - PredictStep fails (InvalidArgument) on inputs that make no sense
//     (no GPUs, zero bandwidth, overlap outside [0, 1], servers < 1,
//     gpus not a multiple of gpus_per_node for hierarchy kNode, ...).
//
// What it models (every term is in StepPrediction, one field per phase):
//   ring  t = cast + 2(P-1)/P * E * b / (eff * link) + 2(P-1) * latency
//             + (P-1)/P * E * 4 / reduce        (NCCL's FP8 ring sums in FP8,
//             so b = 1 for it; the reduce term is the gloo-on-CPU sum)
//   service, flat (hierarchy kNone): each worker moves E * b_push up and
//     E * b_pull down; each server receives P/S shares (P * E * b_push / S)
//     and sends as many back; a phase takes the slower of the worker's link
//     and the server's NIC, plus one latency;
//       net = combine(push, pull, push_pull_overlap)
//     where combine(a, b, o) = (1 - o)(a + b) + o max(a, b): 0 = one after
//     the other, 1 = fully overlapped.
//   service, node-local (hierarchy kNode; MODELLED ONLY, the service has no
//     node-local aggregation yet): an FP32 reduce-scatter over NVLink among
//     the G GPUs of a node, each GPU transforms/encodes and pushes its 1/G
//     slice (P/G pushes per shard), pulls its slice, and an all-gather of
//     the pulled (still encoded) slices over NVLink; every GPU then decodes
//     (and inverse-transforms) the whole gradient.
//   ops: worker transform (forward before encode, inverse after decode,
//     FLOP count 4 * rows * cols * (r_out + r_in) each, r = min(rank, dim)),
//     encode, decode; server decode-accumulate of every push and one encode
//     of the pull. Each op's time is its elements * 4 / rate, times a
//     contention factor (several daemons sharing the cores of one host).
//   step = compute (forward + backward) + exposed communication, where
//     exposed = max(comm - backward_overlap * backward, tail),
//     tail = comm * min(1, bucket_bytes / (E * 4)) (the last bucket can never
//     hide). Worker ops either run on the compute device (ops_on_compute:
//     they add to compute and cannot hide; the GPU case) or in the
//     communication path, combined with the network by ops_overlap (the CPU
//     daemon case of the testbed).
#ifndef GIFT_BENCH_STEP_MODEL_H_
#define GIFT_BENCH_STEP_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gift::bench {

struct ModelTensor2D {
  std::string name;
  uint64_t rows = 1;  // 1 for a vector
  uint64_t cols = 1;
};

// Totals over a tensor list that the model needs.
struct ModelTotals {
  uint64_t elements = 0;              // every tensor
  uint64_t transformed_elements = 0;  // 2-D tensors (rows, cols > 1) when transformed
  double transform_flops = 0;         // one forward (= one inverse) over the transformed tensors
};
// `transform` false: nothing is transformed (transformed_* = 0).
ModelTotals Totals(const std::vector<ModelTensor2D>& tensors, bool transform, int rank);

// Llama-style blocks: q, k, v, o (d x d), gate and up (ff x d), down
// (d x ff), two norms (d), with ff = llround(ffn_mult * d) (2.75 is what
// `gift-bench cluster` uses); plus, when vocab > 0, an embedding and an
// untied output head (vocab x d). With layers = 0 the number of blocks is
// chosen so that the parameter count is closest to `params` (at least 1).
std::vector<ModelTensor2D> LlamaTensors(int64_t d_model, int layers, double params,
                                        double ffn_mult, int64_t vocab);

enum class Hierarchy { kNone, kNode };

struct Cluster {
  int gpus = 1;            // P, data-parallel workers
  int gpus_per_node = 1;   // G
  double link_bps = 0;     // each GPU's (worker's) network link, bytes/s per direction
  double link_latency_s = 0;
  double link_efficiency = 1;  // goodput / link rate (headers); applies to link and server NICs
  double nvlink_bps = 0;   // per GPU per direction (hierarchy kNode only)
  double nvlink_latency_s = 0;
};

// Per-op throughputs in FP32 bytes per second (0 = free / not modelled).
struct OpRates {
  double encode_bps = 0;           // worker encode to the push codec (or the ring's cast)
  double decode_bps = 0;           // worker decode of the pull codec
  double reduce_bps = 0;           // server decode-accumulate, per push (FP32 out)
  double server_encode_bps = 0;    // server encode of the reduced shard (pull codec)
  double transform_flops_per_s = 0;  // worker forward and inverse transform
  double ring_reduce_bps = 0;      // the ring's own sums (gloo on a CPU); 0 on GPUs
  double worker_contention = 1;    // op times are multiplied by these (>= 1)
  double server_contention = 1;
};

struct Compute {
  double forward_s = 0;
  double backward_s = 0;
  double backward_overlap = 0;  // fraction of backward that can hide communication, [0, 1]
  double bucket_bytes = 0;      // FP32 bytes of the last bucket (never hidden); 0 = no tail
  bool ops_on_compute = false;  // worker ops run on the compute device (GPU)
  double ops_overlap = 0;       // else: combine(worker + server ops, network, this)
};

enum class Method { kRing, kService };

struct MethodConfig {
  std::string label;
  Method method = Method::kRing;
  double bytes_per_element = 4;       // ring: on the wire
  bool ring_cast = false;             // ring: a cast from FP32 first (encode rate)
  double push_bytes_per_element = 4;  // service, incl. scales and headers
  double pull_bytes_per_element = 4;
  bool encode = false;                // service: codec ops run (false for FP32 as is)
  bool transform = false;             // service: GIFT transform of the 2-D tensors
  int servers = 1;
  double server_bps = 0;              // each server's NIC, bytes/s per direction
  Hierarchy hierarchy = Hierarchy::kNone;
  double push_pull_overlap = 0;       // [0, 1]
};

struct StepPrediction {
  std::string label;
  // Bytes per step.
  double gpu_tx_bytes = 0, gpu_rx_bytes = 0;        // one GPU's network link
  double server_tx_bytes = 0, server_rx_bytes = 0;  // one server's NIC (0 for a ring)
  double nvlink_bytes = 0;                          // one GPU, each direction
  // Seconds per step, per phase.
  double worker_encode_s = 0;     // transform forward + encode (or the ring's cast)
  double intra_node_s = 0;        // NVLink reduce-scatter + all-gather (kNode)
  double push_s = 0;
  double server_s = 0;            // decode-accumulate + encode on one server
  double pull_s = 0;
  double worker_decode_s = 0;     // decode + transform inverse
  double network_s = 0;           // ring: the all-reduce; service: combine(push, pull)
  double comm_s = 0;              // all that may hide behind backward
  double compute_s = 0;           // forward + backward (+ worker ops when on compute)
  double exposed_s = 0;
  double step_s = 0;
  std::string bottleneck;         // "worker link", "server NIC", "server reduce", ...
};

absl::StatusOr<StepPrediction> PredictStep(const ModelTotals& totals, const Cluster& cluster,
                                           const OpRates& ops, const Compute& compute,
                                           const MethodConfig& method);

// (1 - o)(a + b) + o max(a, b).
double Combine(double a, double b, double overlap);

// Server sizing for a service method: the fewest servers (1..max_servers)
// whose NICs and reduce are never slower than the workers' links (nic_bound),
// and the fewest whose step is within `tolerance` (e.g. 0.01) of the step
// with nic_bound servers (for_target). When no count up to max_servers keeps
// up, nic_bound is 0 (step_at_nic_bound_s too) and for_target is relative to
// max_servers. Errors as PredictStep.
struct ServerSizing {
  int nic_bound = 0;
  int for_target = 0;
  double step_at_nic_bound_s = 0;
  double step_at_target_s = 0;
};
absl::StatusOr<ServerSizing> SizeServers(const ModelTotals& totals, const Cluster& cluster,
                                         const OpRates& ops, const Compute& compute,
                                         MethodConfig method, double tolerance, int max_servers);

}  // namespace gift::bench

#endif  // GIFT_BENCH_STEP_MODEL_H_
