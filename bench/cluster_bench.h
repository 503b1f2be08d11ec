// `gift-bench cluster`: the whole data path of a local cluster, with its
// baselines measured in the same run.
//
// Starts a LocalCluster (gift-coordinator, --servers gift-server shards and
// --workers gift-worker daemons as real processes on loopback), sets the
// policy (--mode gift|direct|fp32; --source gradients|per-worker in gift mode), registers synthetic
// gradients of a Llama-style model (--layers blocks of --d-model: q, k, v, o d x d; mlp up and
// gate 2.75d x d; down d x 2.75d; two norms of d) with every worker through the Worker API
// (gift_worker_client, POSIX shm), and drives all workers from one thread each: fill the gradients
// (anisotropic, different per step and worker, deterministic), a barrier, PushPull(step), timed
// from the barrier to the reply. Warm-up steps are not timed; in gift mode the warm-up lasts until
// every 2-D tensor is transformed (the first basis needs a few steps to be published and
// activated), at most --max-warmup steps.
//
// Reported per worker: median / p90 step time, push-pull throughput in GB/s
// of FP32 gradient (FP32 bytes / median step), bytes pushed per step; the
// CPU time each daemon kind spent per step. Then, in the same run:
//   - correctness: one more step with measure_error (not timed: the worker
//     first averages exact FP32 copies, which doubles the step's traffic):
//     the largest rel. L2 error the service reports, the same error computed
//     here from the inputs, against the codec's bound; and whether every
//     worker got identical bits (a hash of every worker's buffers after every
//     timed step and the measured one);
//   - ucx_perftest loopback bandwidth (tag_bw, UCX_TLS as the cluster's) at
//     the size of one pushed chunk and at the bytes one worker pushes per
//     step, with the ratios;
//   - PyTorch gloo all-reduce of the same shapes with P processes
//     (bench/gloo_allreduce.py under /usr/bin/python3), with the ratio;
//   - server reduction throughput: server::ChunkReducer taking P pushes of
//     one chunk of the coordinator's chunk size (the last reduces and
//     re-encodes) against memcpy of the same FP32 bytes.
// A baseline that cannot run is reported as skipped, with the reason.
//
// --auth runs the cluster with data-plane authentication (gift-coordinator
// --dataplane-auth and --dataplane-mac MAC: every chunk sealed and checked,
// docs/design.md section 8.2); --auth-compare then starts a second cluster
// with the other setting, runs the same steps and prints the push-pull
// throughput with MACs over that without (the cost of authentication,
// measured in the same run); --auth-rounds N runs N such pairs, the setting
// alternating (on/off, off/on, ...), and reports each pair's ratio and
// their median.
//
// With --placement FILE (tools/gift-cluster/local_cluster.h ClusterPlacement;
// scripts/netlab.sh writes one for its network namespaces) the daemons run
// where it says, the gloo ranks run under the workers' prefixes (rank 0's
// address as the master), and the bytes that crossed each placed host's
// device during the timed steps are reported per step ("links"). gift-bench
// itself then has to run where it can reach the coordinator's address (the
// coordinator's namespace). --list-tensors prints the model's tensors as
// JSON ([{"name": N, "shape": [...]}, ...]) and exits.
// --device-tensors: every worker's gradients are in device memory (one
// cudaMalloc per worker, bench/device_gradients.h) registered by CUDA IPC;
// each step copies the filled gradients to the device before the barrier
// and the averages back after the reply (both outside the timed span), and
// the report adds whether the averages were bit-identical across workers and
// within the codec bound of the exact average. FAILED_PRECONDITION without a
// CUDA build, a device, or a worker that opens CUDA IPC buffers.
// Every number printed is measured in the run that prints it.
#ifndef GIFT_BENCH_CLUSTER_BENCH_H_
#define GIFT_BENCH_CLUSTER_BENCH_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct ClusterBenchOptions {
  int servers = 2;
  int workers = 4;
  int steps = 20;  // timed steps
  int warmup = 2;  // untimed steps first (gift mode: more until transformed)
  int max_warmup = 60;
  int64_t d_model = 512;
  int layers = 2;
  std::string mode = "gift";         // gift | direct | fp32
  std::string codec;                 // push codec ("": e4m3/block128; fp32 mode: fp32)
  std::string pull_codec;            // "": e4m3/block128, fp32 in fp32 mode
  uint32_t period = 1000000;         // refresh period in steps (gift mode)
  std::string source = "gradients";  // gift mode: geometry source, gradients | per-worker
  // gift mode: the reduced gradient's statistics, sketch | exact.
  std::string statistics = "sketch";
  // gift mode: "list" (every 2-D tensor transformed at the policy's rank) or
  // "measured" (the owners choose by measurement under --gift-budget).
  std::string selection = "list";
  std::string gift_budget = "auto";  // measured selection: auto | off | a fraction
  uint32_t rotation_block = 0;       // the policy's transform.rotation_block (0: off)
  std::string gradients = "field";   // synthetic gradients: field | low-rank (GradientShape)
  std::string ucx_tls;  // "": UCX's choice, for the cluster and ucx_perftest
  int server_threads = 1;
  int worker_threads = 1;
  std::string bin_dir;  // "": the daemons of gift-bench's build tree (or next to it)
  std::string dir;      // "": a new temporary directory, removed afterwards
  bool perftest = true;
  std::string perftest_bin = "/usr/bin/ucx_perftest";
  int perftest_iters = 0;  // 0: sized to move ~256 MiB per measurement (20..2000)
  bool gloo = true;
  std::string python = "/usr/bin/python3";
  std::string gloo_script;            // "": bench/gloo_allreduce.py of the source tree
  std::string gloo_mode = "buckets";  // buckets (25 MiB, as DDP) | flat | per-tensor
  std::string gloo_dtype = "fp32";    // fp32 | bf16 | fp16: the all-reduced buffers' type
  std::string placement_file;         // "": every process on loopback
  bool list_tensors = false;
  bool reducer = true;
  int reducer_reps = 10;
  uint64_t chunk_bytes = uint64_t{4} << 20;  // the coordinator's default chunk size (FP32)
  std::string json_path;                     // "" none, "-" stdout
  bool auth = false;                         // data-plane MACs
  bool auth_compare = false;                 // also the other auth setting, and the ratio
  int auth_rounds = 1;                       // pairs of clusters for auth_compare
  std::string mac = "chacha20-poly1305";     // with auth: gift-coordinator --dataplane-mac
  bool device_tensors = false;               // gradients in device memory, by CUDA IPC
};

// Registers `cluster` on `parent`.
Command AddClusterCommand(CLI::App& parent);

absl::Status RunClusterBench(const ClusterBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CLUSTER_BENCH_H_
