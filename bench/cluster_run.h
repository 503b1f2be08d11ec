// One cluster run of `gift-bench cluster` (cluster_bench.h): the policy its
// mode asks for, then every worker driven from its own thread through the
// Worker API, step by step behind a barrier: warm-up, the timed steps with
// the CPU and link counters around them, and one measured step whose error
// is computed here too.
//
// Thread safety: RunCluster starts and joins its own threads; the ClusterRun
// it fills belongs to the caller.
#ifndef GIFT_BENCH_CLUSTER_RUN_H_
#define GIFT_BENCH_CLUSTER_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_util.h"
#include "bench/cluster_bench.h"
#include "bench/device_gradients.h"
#include "bench/synthetic_model.h"
#include "common/codec/codec_spec.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::bench {

enum class Phase { kWarmup, kTimed, kMeasure, kDone };

struct StepSample {
  Phase phase = Phase::kWarmup;
  uint64_t step = 0;
  double wall_s = 0;    // barrier -> reply, as the client saw it
  double worker_s = 0;  // as the worker daemon measured it
  uint64_t bytes_pushed = 0;
  int transformed = 0;
  uint64_t hash = 0;
};

struct WorkerState {
  std::unique_ptr<client::WorkerClient> client;
  std::vector<client::SharedTensor> tensors;  // host tensors (not with --device-tensors)
  // --device-tensors: the gradients in device memory, staged through its
  // host buffers.
  std::unique_ptr<DeviceGradients> device;
  std::vector<StepSample> samples;
  absl::Status error;
  client::PushPullResult last;             // of the current step
  std::vector<std::vector<float>> inputs;  // the measured step's gradients

  // Tensor t's gradient as the bench writes and reads it: the shared tensor,
  // or the device tensor's staging buffer.
  float* gradient(size_t t) { return device != nullptr ? device->host(t) : tensors[t].data(); }
  size_t elements(size_t t) const {
    return device != nullptr ? device->elements(t) : tensors[t].size();
  }
};

struct CpuSnapshot {
  std::vector<std::optional<ProcessUsage>> workers, servers;
  std::optional<ProcessUsage> coordinator, self;
  // With a placement: each placed host's device counters.
  std::vector<tools::LinkCounters> links;
  std::string links_error;
};

// What a run measured; `tensors`, `fp32_bytes`, the specs and
// `transformable` are set by the caller before RunCluster.
struct ClusterRun {
  std::vector<ModelTensor> tensors;
  uint64_t fp32_bytes = 0;  // per worker per step
  codec::CodecSpec push_spec, pull_spec;
  std::vector<WorkerState> workers;
  std::vector<uint32_t> ranks;
  int warmup_steps = 0;
  bool all_transformed = false;
  int transformable = 0;
  bool identical_bits = true;
  std::vector<uint64_t> mismatched_steps;
  double timed_wall_s = 0;
  CpuSnapshot cpu_start, cpu_end;
  // The measured step.
  double max_service_error = 0;
  std::string max_service_error_tensor;
  double max_local_error = 0;
  std::string max_local_error_tensor;
  double max_local_vs_service = 0;  // |local - service| / service, largest
  // The relative L2 error of the measured step's 2-D gradients taken
  // together (sqrt of the summed squared errors over the summed squared
  // norms), computed here: what GIFT lowers.
  double gradient_error_2d = 0;
};

// Sets the policy of --mode on the coordinator at `address`: the codecs, and
// every 2-D tensor transformed (gift; --period, --source, --statistics),
// the owners' measured choice (gift with --selection measured; --gift-budget)
// or none (direct, fp32). INVALID_ARGUMENT for a bad --source or
// --gift-budget.
absl::Status SetClusterPolicy(const std::string& address, const ClusterBenchOptions& o,
                              const codec::CodecSpec& push, const codec::CodecSpec& pull);

// Connects to every worker of `cluster`, registers the run's tensors, drives
// the warm-up, timed and measured steps, and fills `run`. Progress lines go
// to `os`. The first worker error ends the run and is returned.
absl::Status RunCluster(const ClusterBenchOptions& o, tools::LocalCluster& cluster, ClusterRun& run,
                        std::ostream& os);

// The slowest worker's median timed step.
double SlowestMedian(const ClusterRun& run);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CLUSTER_RUN_H_
