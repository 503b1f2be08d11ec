#include "bench/cluster_bench.h"

#include <grpcpp/create_channel.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/gloo_baseline.h"
#include "bench/perftest_baseline.h"
#include "bench/reducer_baseline.h"
#include "bench/synthetic_model.h"
#include "common/base/split_mix64.h"
#include "common/base/status_macros.h"
#include "common/base/temp_dir.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/payload.h"
#include "common/control/coordinator_client.h"
#include "common/control/subprocess.h"
#include "common/dataplane/chunk_header.h"
#include "nlohmann/json.hpp"
#include "server/aggregator/chunk_reducer.h"
#include "server/aggregator/reduction_timing.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---- codec facts -------------------------------------------------------------------

// Relative rounding bound of one element of `spec` (half an ulp at 1, doubled
// for stochastic rounding; 0 for fp32).
double RelativeBound(const codec::CodecSpec& spec) {
  return codec::ElementErrorBound(spec.format, spec.rounding, 1.0, 1.0);
}

// Payload bytes of one chunk of `elements` FP32 values encoded with `spec`
// (1024-wide rows when they divide it, else one row).
absl::StatusOr<uint64_t> ChunkPayloadBytes(const codec::CodecSpec& spec, uint64_t elements) {
  const uint64_t cols = elements % 1024 == 0 ? 1024 : elements;
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                        codec::EncodedTensor::Create(spec, elements / cols, cols));
  const uint64_t dims[] = {elements / cols, cols};
  return codec::PayloadSize(t.view(), dims);
}

// ---- the cluster run -----------------------------------------------------------------

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
  std::vector<client::SharedTensor> tensors;
  std::vector<StepSample> samples;
  absl::Status error;
  client::PushPullResult last;             // of the current step
  std::vector<std::vector<float>> inputs;  // the measured step's gradients
};

struct CpuSnapshot {
  std::vector<std::optional<ProcessUsage>> workers, servers;
  std::optional<ProcessUsage> coordinator, self;
  // With a placement: each placed host's device counters.
  std::vector<tools::LinkCounters> links;
  std::string links_error;
};

CpuSnapshot TakeCpu(tools::LocalCluster& cluster, int servers, int workers) {
  CpuSnapshot s;
  for (int i = 0; i < workers; ++i) {
    s.workers.push_back(ReadProcessUsage(absl::StrCat(cluster.worker(i)->pid())));
  }
  for (int i = 0; i < servers; ++i) {
    s.servers.push_back(ReadProcessUsage(absl::StrCat(cluster.server(i)->pid())));
  }
  s.coordinator = ReadProcessUsage(absl::StrCat(cluster.coordinator()->pid()));
  s.self = ReadProcessUsage("self");
  absl::StatusOr<std::vector<tools::LinkCounters>> links = cluster.ReadLinkCounters();
  if (links.ok()) {
    s.links = *std::move(links);
  } else {
    s.links_error = links.status().ToString();
  }
  return s;
}

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
};

absl::Status SetPolicy(const std::string& address, const ClusterBenchOptions& o,
                       const codec::CodecSpec& push, const codec::CodecSpec& pull) {
  control::CoordinatorClient client(control::CoordinatorClient::MakeChannel(address),
                                    absl::Seconds(30));
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(push);
  *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(pull);
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  if (o.mode == "gift") {
    policy.mutable_selection()->add_include("*");  // every 2-D tensor, always
    policy.mutable_refresh()->set_period_steps(o.period);
    if (o.source == "per-worker") {  // sketches exchanged on every step (collect period 1)
      policy.mutable_transform()->set_source(gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS);
    } else if (o.source != "gradients") {
      return absl::InvalidArgumentError(
          absl::StrCat("--source ", o.source, ": gradients or per-worker"));
    }
  } else {
    policy.mutable_selection()->add_exclude("*");  // none: direct quantization
  }
  absl::StatusOr<gift::v1::Policy> set = client.SetPolicy(policy, 0);
  if (!set.ok())
    return absl::Status(set.status().code(), absl::StrCat("SetPolicy: ", set.status().message()));
  return absl::OkStatus();
}

absl::Status RunCluster(const ClusterBenchOptions& o, tools::LocalCluster& cluster, ClusterRun& run,
                        std::ostream& os) {
  const int P = o.workers;
  run.workers.resize(P);
  std::vector<client::TensorSpec> specs;
  for (const ModelTensor& t : run.tensors) specs.push_back({t.name, t.shape});
  for (int w = 0; w < P; ++w) {
    GIFT_ASSIGN_OR_RETURN(run.workers[w].client,
                          client::WorkerClient::Connect(cluster.worker_socket(w)));
  }
  // Register on all workers at once: each call waits for the coordinator to
  // assign the tensor ids.
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < P; ++w) {
      threads.emplace_back([&, w] {
        auto tensors = run.workers[w].client->Register(specs);
        if (tensors.ok()) {
          run.workers[w].tensors = *std::move(tensors);
        } else {
          run.workers[w].error = tensors.status();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int w = 0; w < P; ++w) {
      if (!run.workers[w].error.ok()) {
        return absl::Status(run.workers[w].error.code(),
                            absl::StrCat("worker ", w, ": ", run.workers[w].error.message()));
      }
      run.ranks.push_back(run.workers[w].client->rank());
    }
  }
  GradientSource source(run.tensors);

  // Shared driver state; written only by the barrier's completion step (all
  // threads wait there) or by a thread in its own slot.
  Phase phase = o.warmup > 0 || o.mode == "gift" ? Phase::kWarmup : Phase::kTimed;
  int warm_done = 0, timed_done = 0;
  Clock::time_point timed_start = Clock::now();
  if (phase == Phase::kTimed) run.cpu_start = TakeCpu(cluster, o.servers, P);
  auto decide = [&]() noexcept {
    const Phase current = phase;
    // Errors end the run.
    for (int w = 0; w < P; ++w) {
      if (!run.workers[w].error.ok()) {
        phase = Phase::kDone;
        return;
      }
    }
    const StepSample& first = run.workers[0].samples.back();
    for (int w = 1; w < P; ++w) {
      if (run.workers[w].samples.back().hash != first.hash && current != Phase::kWarmup) {
        run.identical_bits = false;
        run.mismatched_steps.push_back(first.step);
        break;
      }
    }
    switch (current) {
      case Phase::kWarmup: {
        ++warm_done;
        bool transformed = true;
        for (int w = 0; w < P; ++w) {
          transformed =
              transformed && run.workers[w].samples.back().transformed == run.transformable;
        }
        run.all_transformed = transformed;
        const bool ready = o.mode != "gift" || transformed;
        if (warm_done >= o.warmup && (ready || warm_done >= o.max_warmup)) {
          phase = Phase::kTimed;
          run.warmup_steps = warm_done;
          run.cpu_start = TakeCpu(cluster, o.servers, P);
          timed_start = Clock::now();
        }
        break;
      }
      case Phase::kTimed:
        if (++timed_done >= o.steps) {
          run.timed_wall_s = SecondsSince(timed_start);
          run.cpu_end = TakeCpu(cluster, o.servers, P);
          phase = Phase::kMeasure;
        }
        break;
      case Phase::kMeasure:
      case Phase::kDone:
        phase = Phase::kDone;
        break;
    }
  };
  std::barrier ready_barrier(P);
  std::barrier done_barrier(P, decide);

  auto drive = [&](int w) {
    WorkerState& ws = run.workers[w];
    for (uint64_t step = 0; phase != Phase::kDone; ++step) {
      const Phase current = phase;
      for (size_t t = 0; t < run.tensors.size(); ++t) {
        source.Fill(t, step, w, ws.tensors[t].data());
      }
      if (current == Phase::kMeasure) {
        ws.inputs.clear();
        for (const client::SharedTensor& t : ws.tensors) {
          ws.inputs.emplace_back(t.data(), t.data() + t.size());
        }
      }
      ready_barrier.arrive_and_wait();
      const Clock::time_point start = Clock::now();
      absl::StatusOr<client::PushPullResult> result =
          ws.client->PushPull(step, current == Phase::kMeasure);
      const double wall = SecondsSince(start);
      StepSample sample{.phase = current, .step = step, .wall_s = wall};
      if (result.ok()) {
        sample.worker_s = result->seconds;
        for (const client::TensorResult& r : result->tensors) {
          sample.bytes_pushed += r.bytes_sent;
          sample.transformed += r.transformed ? 1 : 0;
        }
        uint64_t h = 0xCBF29CE484222325ull;
        for (const client::SharedTensor& t : ws.tensors) h = HashFloats(t.data(), t.size(), h);
        sample.hash = h;
        ws.last = *std::move(result);
      } else {
        ws.error = absl::Status(
            result.status().code(),
            absl::StrCat("worker ", w, " step ", step, ": ", result.status().message()));
      }
      ws.samples.push_back(sample);
      done_barrier.arrive_and_wait();
    }
  };
  os << "running: " << o.warmup << "+ warm-up, " << o.steps << " timed steps, 1 measured step\n"
     << std::flush;
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < P; ++w) threads.emplace_back(drive, w);
    for (std::thread& t : threads) t.join();
  }
  for (int w = 0; w < P; ++w) {
    if (!run.workers[w].error.ok()) return run.workers[w].error;
  }

  // The measured step: the service's errors, and the same computed here.
  for (int w = 0; w < P; ++w) {
    for (const client::TensorResult& r : run.workers[w].last.tensors) {
      if (std::isfinite(r.rel_l2_error) && r.rel_l2_error >= run.max_service_error) {
        run.max_service_error = r.rel_l2_error;
        run.max_service_error_tensor = r.name;
      }
    }
  }
  for (size_t t = 0; t < run.tensors.size(); ++t) {
    const size_t n = run.tensors[t].elements();
    const float* got = run.workers[0].tensors[t].data();
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int w = 0; w < P; ++w) exact += run.workers[w].inputs[t][i];
      exact /= P;
      err += (got[i] - exact) * (got[i] - exact);
      norm += exact * exact;
    }
    const double rel = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
    if (rel >= run.max_local_error) {
      run.max_local_error = rel;
      run.max_local_error_tensor = run.tensors[t].name;
    }
    const double service = run.workers[0].last.tensors[t].rel_l2_error;
    if (service > 0) {
      run.max_local_vs_service =
          std::max(run.max_local_vs_service, std::abs(rel - service) / service);
    }
  }
  return absl::OkStatus();
}

// ---- output helpers ----------------------------------------------------------------------

double Gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

json Ratio(double num, double den) {
  if (!(num > 0) || !(den > 0)) return nullptr;
  return num / den;
}

std::string RatioText(const json& r) {
  return r.is_number() ? absl::StrFormat("%.3f", r.get<double>()) : "-";
}

// The slowest worker's median timed step.
double SlowestMedian(const ClusterRun& run) {
  double slowest = 0;
  for (const WorkerState& ws : run.workers) {
    std::vector<double> wall;
    for (const StepSample& s : ws.samples) {
      if (s.phase == Phase::kTimed) wall.push_back(s.wall_s);
    }
    slowest = std::max(slowest, Median(wall));
  }
  return slowest;
}

// The growth of one field of ProcessUsage from `a` to `b`, summed over the
// processes that both snapshots saw.
double Growth(const std::vector<std::optional<ProcessUsage>>& a,
              const std::vector<std::optional<ProcessUsage>>& b, double ProcessUsage::*field) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] && b[i]) s += (*b[i]).*field - (*a[i]).*field;
  }
  return s;
}

double Growth(const std::optional<ProcessUsage>& a, const std::optional<ProcessUsage>& b,
              double ProcessUsage::*field) {
  return a && b ? (*b).*field - (*a).*field : 0;
}

}  // namespace

absl::Status RunClusterBench(const ClusterBenchOptions& o) {
  if (o.mode != "gift" && o.mode != "direct" && o.mode != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat("--mode ", o.mode, ": gift, direct or fp32"));
  }
  if (o.gloo_mode != "buckets" && o.gloo_mode != "flat" && o.gloo_mode != "per-tensor") {
    return absl::InvalidArgumentError("--gloo-mode: buckets, flat or per-tensor");
  }
  if (o.list_tensors) {
    json list = json::array();
    for (const ModelTensor& t : ModelTensors(o.d_model, o.layers)) {
      list.push_back({{"name", t.name}, {"shape", t.shape}});
    }
    std::cout << list.dump() << "\n";
    return absl::OkStatus();
  }
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(o.json_path));
  std::ostream& os = sinks.table();

  const std::string push_name =
      !o.codec.empty() ? o.codec : (o.mode == "fp32" ? "fp32" : "e4m3/block128");
  // FP8 both ways, the service's default pull (and the FP8 all-reduce direct
  // mode stands for): half the bytes of a bf16 pull for 1.4x the error.
  const std::string pull_name =
      !o.pull_codec.empty() ? o.pull_codec : (o.mode == "fp32" ? "fp32" : "e4m3/block128");
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec push_spec, codec::ParseCodecSpec(push_name));
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec pull_spec, codec::ParseCodecSpec(pull_name));
  auto init_run = [&](ClusterRun& r) {
    r.push_spec = push_spec;
    r.pull_spec = pull_spec;
    r.tensors = ModelTensors(o.d_model, o.layers);
    for (const ModelTensor& t : r.tensors) {
      r.fp32_bytes += t.elements() * sizeof(float);
      r.transformable += o.mode == "gift" && t.matrix() ? 1 : 0;
    }
  };
  ClusterRun run;
  init_run(run);

  // The daemons.
  tools::LocalClusterOptions cluster_options;
  if (!o.bin_dir.empty()) {
    cluster_options.binaries = {.coordinator = o.bin_dir + "/gift-coordinator",
                                .server = o.bin_dir + "/gift-server",
                                .worker = o.bin_dir + "/gift-worker"};
  } else {
    GIFT_ASSIGN_OR_RETURN(cluster_options.binaries,
                          tools::LocalClusterBinaries::NextTo(SelfPath()));
  }
  std::optional<TempDir> temp;
  if (o.dir.empty()) {
    GIFT_ASSIGN_OR_RETURN(temp, TempDir::Create("gift-bench-cluster"));
    cluster_options.dir = temp->path();
  } else {
    cluster_options.dir = o.dir;
  }
  cluster_options.servers = o.servers;
  cluster_options.workers = o.workers;
  cluster_options.ucx_tls = o.ucx_tls;
  cluster_options.server_threads = o.server_threads;
  cluster_options.worker_threads = o.worker_threads;
  cluster_options.lease_ttl = absl::Seconds(10);  // a loaded machine must not lose members
  cluster_options.step_timeout = absl::Seconds(120);
  cluster_options.coordinator_args = {"--chunk-bytes", absl::StrCat(o.chunk_bytes)};
  if (!o.placement_file.empty()) {
    GIFT_ASSIGN_OR_RETURN(cluster_options.placement,
                          tools::ClusterPlacement::FromJsonFile(o.placement_file));
  }

  os << absl::StrFormat(
      "gift-bench cluster: %d servers, %d workers, mode %s (push %s, pull %s), d_model %d x %d "
      "layers: %d tensors, %.1f MB FP32 per worker per step; UCX_TLS=%s; %d CPUs\n",
      o.servers, o.workers, o.mode, codec::ToString(run.push_spec), codec::ToString(run.pull_spec),
      o.d_model, o.layers, run.tensors.size(), run.fp32_bytes / 1e6,
      o.ucx_tls.empty() ? "(UCX's choice)" : o.ucx_tls, HardwareThreads());
  // One cluster, started, driven and stopped: the run's numbers in `r`, the
  // cluster's Stop status in `stopped`.
  auto run_cluster = [&](bool auth, ClusterRun& r, absl::Status& stopped) -> absl::Status {
    tools::LocalClusterOptions options = cluster_options;
    if (auth) options.coordinator_args.push_back("--dataplane-auth");
    const Clock::time_point t0 = Clock::now();
    GIFT_ASSIGN_OR_RETURN(std::unique_ptr<tools::LocalCluster> cluster,
                          tools::LocalCluster::Start(options));
    os << absl::StrFormat("cluster up in %.1f s (%s), data-plane authentication %s\n",
                          SecondsSince(t0), options.dir, auth ? "on" : "off")
       << std::flush;
    absl::Status status = SetPolicy(cluster->coordinator_address(), o, r.push_spec, r.pull_spec);
    if (status.ok()) status = RunCluster(o, *cluster, r, os);
    if (!status.ok()) {
      std::string logs;
      for (int w = 0; w < o.workers; ++w) {
        logs += absl::StrCat("\n--- worker ", w, ": ",
                             OutputTail(cluster->worker(w)->stderr_text(), 1500));
      }
      (void)cluster->Stop();
      return absl::Status(status.code(), absl::StrCat(status.message(), logs));
    }
    stopped = cluster->Stop();
    return absl::OkStatus();
  };
  absl::Status stopped;
  GIFT_RETURN_IF_ERROR(run_cluster(o.auth, run, stopped));

  // ---- per-worker numbers
  json workers = json::array();
  std::vector<double> all_medians;
  double bytes_pushed = 0;
  os << "\npush-pull per worker (" << o.steps << " timed steps after " << run.warmup_steps
     << " warm-up; time from a barrier to the reply)\n";
  WriteLine(os, absl::StrFormat("%-7s %4s  %10s  %10s  %10s  %12s  %14s  %8s", "worker", "rank",
                                "median ms", "p90 ms", "daemon ms", "GB/s FP32", "pushed B/step",
                                "FP32/wire"));
  for (int w = 0; w < o.workers; ++w) {
    std::vector<double> wall, daemon;
    uint64_t pushed = 0;
    for (const StepSample& s : run.workers[w].samples) {
      if (s.phase != Phase::kTimed) continue;
      wall.push_back(s.wall_s);
      daemon.push_back(s.worker_s);
      pushed = s.bytes_pushed;
    }
    const double median = Median(wall), p90 = Percentile(wall, 0.9);
    all_medians.push_back(median);
    if (w == 0) bytes_pushed = static_cast<double>(pushed);
    workers.push_back({{"worker", w},
                       {"rank", run.ranks[w]},
                       {"median_step_s", median},
                       {"p90_step_s", p90},
                       {"daemon_median_step_s", Median(daemon)},
                       {"gbps_fp32", Gbps(run.fp32_bytes, median)},
                       {"bytes_pushed_per_step", pushed},
                       {"step_seconds", wall}});
    WriteLine(os, absl::StrFormat("%-7d %4d  %10.1f  %10.1f  %10.1f  %12.3f  %14d  %8.2f", w,
                                  run.ranks[w], 1e3 * median, 1e3 * p90, 1e3 * Median(daemon),
                                  Gbps(run.fp32_bytes, median), pushed,
                                  pushed > 0 ? run.fp32_bytes / static_cast<double>(pushed) : 0));
  }
  const double slowest_median = *std::max_element(all_medians.begin(), all_medians.end());
  const double pp_gbps = Gbps(run.fp32_bytes, slowest_median);
  const double wire_gbps = Gbps(bytes_pushed, slowest_median);

  // ---- the cost of data-plane authentication: the same steps on a second
  // cluster with the other setting
  json auth = {{"on", o.auth}};
  if (o.auth_compare) {
    ClusterRun other;
    init_run(other);
    absl::Status other_stopped;
    GIFT_RETURN_IF_ERROR(run_cluster(!o.auth, other, other_stopped));
    const double other_gbps = Gbps(other.fp32_bytes, SlowestMedian(other));
    const double on_gbps = o.auth ? pp_gbps : other_gbps;
    const double off_gbps = o.auth ? other_gbps : pp_gbps;
    auth["gbps_fp32_with_macs"] = on_gbps;
    auth["gbps_fp32_without_macs"] = off_gbps;
    auth["ratio_with_to_without"] = Ratio(on_gbps, off_gbps);
    auth["identical_bits_with_other"] = other.identical_bits;
    os << absl::StrFormat(
        "data-plane authentication (AES-256-GMAC on every chunk): push-pull %.3f GB/s FP32 with "
        "MACs, %.3f GB/s without (slowest worker's median step); with / without = %s\n",
        on_gbps, off_gbps, RatioText(auth["ratio_with_to_without"]));
    // The daemons' CPU per step: what the MACs cost where the daemons' CPU
    // is the bottleneck, far less sensitive than wall time to other load.
    auto daemon_cpu = [&](const ClusterRun& r) {
      return (Growth(r.cpu_start.workers, r.cpu_end.workers, &ProcessUsage::cpu_s) +
              Growth(r.cpu_start.servers, r.cpu_end.servers, &ProcessUsage::cpu_s)) /
             std::max(1, o.steps);
    };
    const double on_cpu = daemon_cpu(o.auth ? run : other);
    const double off_cpu = daemon_cpu(o.auth ? other : run);
    auth["daemon_cpu_s_per_step_with_macs"] = on_cpu;
    auth["daemon_cpu_s_per_step_without_macs"] = off_cpu;
    auth["cpu_ratio_without_to_with"] = Ratio(off_cpu, on_cpu);
    os << absl::StrFormat(
        "  workers' and servers' CPU per timed step: %.1f ms with MACs, %.1f ms without; "
        "without / with = %s\n",
        1e3 * on_cpu, 1e3 * off_cpu, RatioText(auth["cpu_ratio_without_to_with"]));
  }

  // Where the CPU went during the timed steps.
  const double timed_steps = std::max(1, o.steps);
  const CpuSnapshot& c0 = run.cpu_start;
  const CpuSnapshot& c1 = run.cpu_end;
  const auto cpu_s = &ProcessUsage::cpu_s;
  const auto faults = &ProcessUsage::minor_faults;
  const double cpu_workers = Growth(c0.workers, c1.workers, cpu_s);
  const double cpu_servers = Growth(c0.servers, c1.servers, cpu_s);
  const double cpu_coord = Growth(c0.coordinator, c1.coordinator, cpu_s);
  const double cpu_self = Growth(c0.self, c1.self, cpu_s);
  // Minor page faults per step per process (not summed over a kind): a
  // steady state that allocates nothing of a step's size faults in nothing.
  const double faults_worker = Growth(c0.workers, c1.workers, faults) / o.workers / timed_steps;
  const double faults_server = Growth(c0.servers, c1.servers, faults) / o.servers / timed_steps;
  const double faults_coord = Growth(c0.coordinator, c1.coordinator, faults) / timed_steps;
  const double faults_self = Growth(c0.self, c1.self, faults) / timed_steps;
  json cpu = {{"timed_wall_s", run.timed_wall_s},
              {"workers_cpu_s_per_step", cpu_workers / timed_steps},
              {"servers_cpu_s_per_step", cpu_servers / timed_steps},
              {"coordinator_cpu_s_per_step", cpu_coord / timed_steps},
              {"bench_cpu_s_per_step", cpu_self / timed_steps},
              {"worker_cpu_s_per_step_each", cpu_workers / o.workers / timed_steps},
              {"server_cpu_s_per_step_each", cpu_servers / o.servers / timed_steps},
              {"minor_faults_per_step_per_worker", faults_worker},
              {"minor_faults_per_step_per_server", faults_server},
              {"minor_faults_per_step_coordinator", faults_coord},
              {"minor_faults_per_step_bench", faults_self},
              {"cpus", HardwareThreads()}};
  os << absl::StrFormat(
      "CPU per timed step (all processes of a kind): workers %.0f ms, servers %.0f ms, "
      "coordinator %.0f ms, gift-bench clients (gradient fill, hash, gRPC) %.0f ms; wall %.0f ms "
      "per step on %d CPUs\n",
      1e3 * cpu_workers / timed_steps, 1e3 * cpu_servers / timed_steps,
      1e3 * cpu_coord / timed_steps, 1e3 * cpu_self / timed_steps,
      1e3 * run.timed_wall_s / timed_steps, HardwareThreads());
  os << absl::StrFormat(
      "CPU per timed step per process: worker %.0f ms, server %.0f ms; minor page faults per "
      "timed step per process: worker %.0f, server %.0f, coordinator %.0f, gift-bench %.0f\n",
      1e3 * cpu_workers / o.workers / timed_steps, 1e3 * cpu_servers / o.servers / timed_steps,
      faults_worker, faults_server, faults_coord, faults_self);

  // ---- bytes on each placed host's device
  json links = json::array();
  if (!c0.links_error.empty() || !c1.links_error.empty()) {
    os << "link counters: " << (c0.links_error.empty() ? c1.links_error : c0.links_error) << "\n";
  } else if (!c1.links.empty() && c0.links.size() == c1.links.size()) {
    os << "\nbytes on each host's device per timed step (" << o.steps << " steps)\n";
    WriteLine(os,
              absl::StrFormat("%-16s %-12s %-8s %14s %14s %10s %10s %10s", "host", "kind", "device",
                              "tx B/step", "rx B/step", "tx pkts", "rx pkts", "TCP retx"));
    for (size_t i = 0; i < c1.links.size(); ++i) {
      const tools::LinkCounters& a = c0.links[i];
      const tools::LinkCounters& b = c1.links[i];
      auto per_step = [&](uint64_t x, uint64_t y) {
        return static_cast<double>(y - x) / timed_steps;
      };
      links.push_back(
          {{"host", b.host},
           {"kind", b.kind},
           {"device", b.device},
           {"tx_bytes_per_step", per_step(a.tx_bytes, b.tx_bytes)},
           {"rx_bytes_per_step", per_step(a.rx_bytes, b.rx_bytes)},
           {"tx_packets_per_step", per_step(a.tx_packets, b.tx_packets)},
           {"rx_packets_per_step", per_step(a.rx_packets, b.rx_packets)},
           {"tcp_retrans_segs_per_step", per_step(a.tcp_retrans_segs, b.tcp_retrans_segs)}});
      WriteLine(os, absl::StrFormat("%-16s %-12s %-8s %14.0f %14.0f %10.0f %10.0f %10.0f", b.host,
                                    b.kind, b.device, per_step(a.tx_bytes, b.tx_bytes),
                                    per_step(a.rx_bytes, b.rx_bytes),
                                    per_step(a.tx_packets, b.tx_packets),
                                    per_step(a.rx_packets, b.rx_packets),
                                    per_step(a.tcp_retrans_segs, b.tcp_retrans_segs)));
    }
  }

  // ---- correctness
  const double u_push = RelativeBound(run.push_spec), u_pull = RelativeBound(run.pull_spec);
  const double bound = u_push + u_pull;
  json correctness = {
      {"measured_step", run.workers[0].samples.back().step},
      {"max_rel_l2_error", run.max_service_error},
      {"max_rel_l2_error_tensor", run.max_service_error_tensor},
      {"max_rel_l2_error_local", run.max_local_error},
      {"max_rel_l2_error_local_tensor", run.max_local_error_tensor},
      {"bound", bound},
      {"bound_push", u_push},
      {"bound_pull", u_pull},
      {"bound_basis",
       "per-element relative rounding bound of the push format plus that of the pull format "
       "(half an ulp at 1: e4m3 2^-4, e5m2 2^-3, bf16 2^-8, fp32 0; doubled for stochastic "
       "rounding); the rel. L2 error of an average of independently rounded inputs stays "
       "below it for direct quantization, and for GIFT it is the same per-element bound "
       "applied in the transformed basis"},
      {"error_over_bound", bound > 0 ? json(run.max_service_error / bound) : json(nullptr)},
      {"identical_bits", run.identical_bits},
      {"mismatched_steps", run.mismatched_steps},
      {"transformed_tensors", run.workers[0].samples.back().transformed},
      {"transformable_tensors", run.transformable},
      {"all_transformed_when_timed", o.mode != "gift" || run.all_transformed}};
  os << absl::StrFormat(
      "\ncorrectness (step %d, measure_error): max rel. L2 error %.3e (%s; computed here: %.3e), "
      "bound %.3e (push %.3e + pull %.3e) -> %s of the bound; identical bits on every worker "
      "(timed + measured steps): %s; transformed tensors %d of %d\n",
      run.workers[0].samples.back().step, run.max_service_error, run.max_service_error_tensor,
      run.max_local_error, bound, u_push, u_pull,
      bound > 0 ? absl::StrFormat("%.3f", run.max_service_error / bound) : "n/a",
      run.identical_bits ? "yes" : "NO", run.workers[0].samples.back().transformed,
      static_cast<int>(run.tensors.size()));
  if (o.mode == "gift" && !run.all_transformed) {
    os << "note: not every 2-D tensor was transformed when timing began (raise --max-warmup)\n";
  }

  // ---- baselines
  json perftest = {{"ran", false}};
  std::vector<PerftestResult> perf;
  if (o.perftest) {
    if (access(o.perftest_bin.c_str(), X_OK) != 0) {
      perftest["skipped"] = absl::StrCat(o.perftest_bin, " is not executable (Debian: ucx-utils)");
    } else {
      const PerftestOptions perftest_options{
          .binary = o.perftest_bin, .ucx_tls = o.ucx_tls, .iterations = o.perftest_iters};
      absl::StatusOr<uint64_t> chunk = ChunkPayloadBytes(run.push_spec, o.chunk_bytes / 4);
      if (chunk.ok()) perf.push_back(RunPerftest(perftest_options, "one pushed chunk", *chunk));
      if (bytes_pushed > 0) {
        perf.push_back(RunPerftest(perftest_options, "bytes pushed per step",
                                   static_cast<uint64_t>(bytes_pushed)));
      }
      json results = json::array();
      for (const PerftestResult& p : perf) {
        json r = {
            {"label", p.label}, {"message_bytes", p.message_bytes}, {"iterations", p.iterations}};
        if (p.bytes_per_s > 0) {
          r["gbps"] = p.bytes_per_s / 1e9;
          r["push_pull_fp32_ratio"] = Ratio(pp_gbps, p.bytes_per_s / 1e9);
          r["push_pull_wire_ratio"] = Ratio(wire_gbps, p.bytes_per_s / 1e9);
          perftest["ran"] = true;
        } else {
          r["error"] = p.error;
        }
        results.push_back(r);
      }
      perftest["tls"] = o.ucx_tls.empty() ? "(UCX's choice)" : o.ucx_tls;
      perftest["test"] = "tag_bw, 127.0.0.1, two processes";
      perftest["results"] = results;
    }
  } else {
    perftest["skipped"] = "--no-perftest";
  }

  json gloo = {{"ran", false}};
  if (o.gloo) {
    os << "\nrunning the gloo all-reduce baseline (" << o.workers << " processes)...\n"
       << std::flush;
    const GlooOptions gloo_options{.python = o.python,
                                   .script = o.gloo_script,
                                   .placement_file = o.placement_file,
                                   .world = o.workers,
                                   .mode = o.gloo_mode,
                                   .dtype = o.gloo_dtype};
    GlooResult g = RunGloo(gloo_options, run.tensors, o.steps, std::max(1, o.warmup));
    if (g.ran) {
      gloo = g.report;
      gloo.erase("step_seconds");
      gloo["ran"] = true;
      gloo["median_step_s"] = g.median_s;
      gloo["p90_step_s"] = g.p90_s;
      gloo["gbps_fp32"] = Gbps(run.fp32_bytes, g.median_s);
      gloo["push_pull_speedup"] = Ratio(pp_gbps, Gbps(run.fp32_bytes, g.median_s));
    } else {
      gloo["skipped"] = g.skipped;
    }
  } else {
    gloo["skipped"] = "--no-gloo";
  }

  json reducer = {{"ran", false}};
  ReducerResult red;
  if (o.reducer) {
    absl::StatusOr<ReducerResult> rr = RunReducer({.chunk_bytes = o.chunk_bytes,
                                                   .workers = static_cast<uint32_t>(o.workers),
                                                   .reps = o.reducer_reps},
                                                  run.push_spec, run.pull_spec);
    if (rr.ok()) {
      red = *rr;
      reducer = {{"ran", true},
                 {"ranks", o.workers},
                 {"chunk_shape", {red.rows, red.cols}},
                 {"chunk_fp32_bytes", o.chunk_bytes},
                 {"payload_bytes", red.payload_bytes},
                 {"push_codec", codec::ToString(run.push_spec)},
                 {"pull_codec", codec::ToString(run.pull_spec)},
                 {"threads", 1},
                 {"all_pushes_median_s", red.all_pushes_s},
                 {"last_push_median_s", red.last_push_s},
                 {"gbps_fp32_out", Gbps(o.chunk_bytes, red.all_pushes_s)},
                 {"reduce_encode_gbps_fp32_out", Gbps(o.chunk_bytes, red.last_push_s)},
                 {"memcpy_gbps", Gbps(o.chunk_bytes, red.memcpy_s)},
                 {"ratio_to_memcpy",
                  Ratio(Gbps(o.chunk_bytes, red.all_pushes_s), Gbps(o.chunk_bytes, red.memcpy_s))}};
    } else {
      reducer["skipped"] = rr.status().ToString();
    }
  } else {
    reducer["skipped"] = "--no-reducer";
  }

  // ---- the summary table
  os << "\nthroughput per worker, GB/s of FP32 gradient (" << run.fp32_bytes << " B per step)\n";
  WriteLine(os,
            absl::StrFormat("%-52s  %10s  %10s  %s", "", "GB/s", "median ms", "push-pull / this"));
  WriteLine(os, absl::StrFormat("%-52s  %10.3f  %10.1f  %s",
                                absl::StrCat("gift push-pull (", o.mode, ", slowest worker)"),
                                pp_gbps, 1e3 * slowest_median, ""));
  WriteLine(os, absl::StrFormat("%-52s  %10.3f  %10s  %s",
                                "  same, bytes on the wire (pushed only)", wire_gbps, "", ""));
  if (o.gloo) {
    if (gloo.value("ran", false)) {
      WriteLine(os, absl::StrFormat("%-52s  %10.3f  %10.1f  %s",
                                    absl::StrCat("gloo all-reduce, ", o.workers, " procs (",
                                                 gloo.value("mode", ""), ", ", o.gloo_dtype, ")"),
                                    gloo["gbps_fp32"].get<double>(),
                                    1e3 * gloo["median_step_s"].get<double>(),
                                    RatioText(gloo["push_pull_speedup"])));
    } else {
      WriteLine(
          os, absl::StrFormat("%-52s  skipped: %s", "gloo all-reduce", gloo.value("skipped", "")));
    }
  }
  if (o.perftest) {
    if (perftest.contains("skipped")) {
      WriteLine(os, absl::StrFormat("%-52s  skipped: %s", "ucx_perftest tag_bw",
                                    perftest["skipped"].get<std::string>()));
    }
    for (const PerftestResult& p : perf) {
      const std::string name =
          absl::StrCat("ucx_perftest tag_bw ", p.message_bytes, " B (", p.label, ")");
      if (p.bytes_per_s > 0) {
        WriteLine(
            os, absl::StrFormat("%-52s  %10.3f  %10s  FP32 %s, wire %s", name, p.bytes_per_s / 1e9,
                                "", RatioText(Ratio(pp_gbps, p.bytes_per_s / 1e9)),
                                RatioText(Ratio(wire_gbps, p.bytes_per_s / 1e9))));
      } else {
        WriteLine(os, absl::StrFormat("%-52s  failed: %s", name, p.error));
      }
    }
  }
  if (o.reducer) {
    if (red.ran) {
      WriteLine(os, absl::StrFormat(
                        "\nserver reduction, one %llu x %llu chunk (%s -> %s), %d ranks, 1 thread:",
                        static_cast<unsigned long long>(red.rows),
                        static_cast<unsigned long long>(red.cols), codec::ToString(run.push_spec),
                        codec::ToString(run.pull_spec), o.workers));
      WriteLine(os, absl::StrFormat("  %d placed pushes (checksum + parse in place; the last "
                                    "reduces and re-encodes into the send buffer): "
                                    "%.3f GB/s FP32 out (%.2f ms)",
                                    o.workers, Gbps(o.chunk_bytes, red.all_pushes_s),
                                    1e3 * red.all_pushes_s));
      WriteLine(os, absl::StrFormat("  the completing push alone: %.3f GB/s (%.2f ms)",
                                    Gbps(o.chunk_bytes, red.last_push_s), 1e3 * red.last_push_s));
      WriteLine(os, absl::StrFormat("  memcpy of the same FP32 bytes: %.3f GB/s; reduction / "
                                    "memcpy = %s",
                                    Gbps(o.chunk_bytes, red.memcpy_s),
                                    RatioText(reducer["ratio_to_memcpy"])));
    } else {
      WriteLine(os, absl::StrFormat("server reduction: skipped: %s", reducer.value("skipped", "")));
    }
  }
  if (!stopped.ok()) os << "note: stopping the cluster: " << stopped << "\n";

  json tensor_list = json::array();
  for (const ModelTensor& t : run.tensors)
    tensor_list.push_back({{"name", t.name}, {"shape", t.shape}});
  json doc = {{"benchmark", "cluster"},
              {"config",
               {{"servers", o.servers},
                {"workers", o.workers},
                {"steps", o.steps},
                {"warmup_steps", run.warmup_steps},
                {"d_model", o.d_model},
                {"layers", o.layers},
                {"mode", o.mode},
                {"push_codec", codec::ToString(run.push_spec)},
                {"pull_codec", codec::ToString(run.pull_spec)},
                {"refresh_period", o.mode == "gift" ? json(o.period) : json(nullptr)},
                {"ucx_tls", o.ucx_tls},
                {"chunk_bytes", o.chunk_bytes},
                {"server_threads", o.server_threads},
                {"worker_threads", o.worker_threads},
                {"fp32_bytes_per_worker_step", run.fp32_bytes},
                {"tensors", tensor_list},
                {"placement", o.placement_file},
                {"gloo_dtype", o.gloo_dtype},
                {"cpus", HardwareThreads()}}},
              {"workers", workers},
              {"push_pull",
               {{"gbps_fp32", pp_gbps},
                {"wire_gbps_pushed", wire_gbps},
                {"slowest_median_step_s", slowest_median},
                {"bytes_pushed_per_step", bytes_pushed}}},
              {"cpu", cpu},
              {"auth", auth},
              {"links", links},
              {"correctness", correctness},
              {"identical_bits", run.identical_bits},
              {"ucx_perftest", perftest},
              {"gloo", gloo},
              {"reducer", reducer}};
  return sinks.WriteJson(doc);
}

Command AddClusterCommand(CLI::App& parent) {
  auto o = std::make_shared<ClusterBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "cluster",
      "push-pull throughput of a local cluster (real daemons on loopback) against ucx_perftest, "
      "gloo all-reduce and memcpy, with the error and bitwise agreement of the result");
  app->add_option("--servers", o->servers, "gift-server shards")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--workers", o->workers, "gift-worker daemons (one driving thread each)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--steps", o->steps, "timed steps")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--warmup", o->warmup, "untimed steps first")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app->add_option("--max-warmup", o->max_warmup,
                  "gift mode: warm up until every 2-D tensor is transformed, at most this many "
                  "steps")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app->add_option("--d-model", o->d_model, "model width d")
      ->check(CLI::Range(2, 65536))
      ->capture_default_str();
  app->add_option("--layers", o->layers, "Llama-style blocks")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--mode", o->mode,
                  "gift (every 2-D tensor transformed), direct (quantized, no transform) or fp32 "
                  "(exact)")
      ->check(CLI::IsMember({"gift", "direct", "fp32"}))
      ->capture_default_str();
  app->add_option("--codec", o->codec, "push codec (default: e4m3/block128; fp32 in fp32 mode)")
      ->check(CodecSpecValidator());
  app->add_option("--pull-codec", o->pull_codec,
                  "pull codec (default: e4m3/block128, the service's default; fp32 in fp32 mode)")
      ->check(CodecSpecValidator());
  app->add_option("--source", o->source, "gift mode: geometry source, gradients|per-worker")
      ->capture_default_str();
  app->add_option("--period", o->period, "gift mode: basis refresh period in steps")
      ->check(CLI::Range(1u, 1000000000u))
      ->capture_default_str();
  app->add_option("--ucx-tls", o->ucx_tls,
                  "UCX_TLS of the daemons and of ucx_perftest (default: UCX's choice)");
  app->add_option("--server-threads", o->server_threads, "--threads of each gift-server")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--worker-threads", o->worker_threads, "--threads of each gift-worker")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--chunk-bytes", o->chunk_bytes,
                  "the coordinator's chunk size in FP32 bytes (also the reducer benchmark's)")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 30))
      ->capture_default_str();
  app->add_option("--bin-dir", o->bin_dir,
                  "directory of gift-coordinator, gift-server, gift-worker (default: "
                  "gift-bench's build tree, or next to it)");
  app->add_option("--dir", o->dir, "cluster directory, kept (default: a temporary one)");
  app->add_flag("!--no-perftest", o->perftest, "skip the ucx_perftest baseline");
  app->add_option("--perftest-bin", o->perftest_bin, "ucx_perftest binary")->capture_default_str();
  app->add_option("--perftest-iters", o->perftest_iters,
                  "ucx_perftest iterations (default: ~256 MiB per measurement, 20..2000)")
      ->check(CLI::Range(0, 1000000));
  app->add_flag("!--no-gloo", o->gloo, "skip the PyTorch gloo all-reduce baseline");
  app->add_option("--python", o->python, "Python with torch for the gloo baseline")
      ->capture_default_str();
  app->add_option("--gloo-script", o->gloo_script,
                  "the gloo baseline script (default: bench/gloo_allreduce.py of the source tree)");
  app->add_option("--gloo-mode", o->gloo_mode,
                  "buckets: 25 MiB flat buckets as DDP; flat: one flat tensor; per-tensor")
      ->check(CLI::IsMember({"buckets", "flat", "per-tensor"}))
      ->capture_default_str();
  app->add_option("--gloo-dtype", o->gloo_dtype,
                  "element type of the gloo all-reduce (fp32, or bf16/fp16: 2-byte baselines)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app->add_option("--placement", o->placement_file,
                  "JSON file: a command prefix, bind address, host and device per daemon (as "
                  "scripts/netlab.sh writes it); default: all on loopback");
  app->add_flag("--list-tensors", o->list_tensors,
                "print the model's tensors (names and shapes) as JSON and exit");
  app->add_flag("!--no-reducer", o->reducer, "skip the server reduction microbenchmark");
  app->add_option("--reducer-reps", o->reducer_reps, "timed chunks in the reducer benchmark")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_flag(
      "--auth", o->auth,
      "data-plane authentication: MACs on every chunk (gift-coordinator --dataplane-auth)");
  app->add_flag("--auth-compare", o->auth_compare,
                "then a second cluster with the other --auth setting, the same steps, and the "
                "throughput ratio with / without MACs");
  app->add_option("--json", o->json_path,
                  "write the numbers as JSON to this file ('-': stdout, table on stderr)");
  return Command{app, [o] { return RunClusterBench(*o); }};
}

}  // namespace gift::bench
