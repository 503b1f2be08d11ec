// `gift-bench cluster`: the driver. Starts the cluster (twice with
// --auth-compare), runs it (cluster_run.h), runs the baselines
// (cluster_baselines.h), and reports per worker, CPU and links, correctness
// and the summary table, as text and JSON.
#include "bench/cluster_bench.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/cluster_baselines.h"
#include "bench/cluster_run.h"
#include "bench/synthetic_model.h"
#include "common/base/status_macros.h"
#include "common/base/temp_dir.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_header.h"
#include "nlohmann/json.hpp"
#include "tools/gift-cluster/local_cluster.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Relative rounding bound of one element of `spec` (half an ulp at 1, doubled
// for stochastic rounding; 0 for fp32).
double RelativeBound(const codec::CodecSpec& spec) {
  return codec::ElementErrorBound(spec.format, spec.rounding, 1.0, 1.0);
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
  if (o.device_tensors) os << "gradients in device memory, registered by CUDA IPC\n";
  // One cluster, started, driven and stopped: the run's numbers in `r`, the
  // cluster's Stop status in `stopped`.
  auto run_cluster = [&](bool auth, ClusterRun& r, absl::Status& stopped) -> absl::Status {
    tools::LocalClusterOptions options = cluster_options;
    if (auth) {
      options.coordinator_args.push_back("--dataplane-auth");
      options.coordinator_args.push_back("--dataplane-mac");
      options.coordinator_args.push_back(o.mac);
    }
    const Clock::time_point t0 = Clock::now();
    GIFT_ASSIGN_OR_RETURN(std::unique_ptr<tools::LocalCluster> cluster,
                          tools::LocalCluster::Start(options));
    os << absl::StrFormat("cluster up in %.1f s (%s), data-plane authentication %s\n",
                          SecondsSince(t0), options.dir, auth ? "on (" + o.mac + ")" : "off")
       << std::flush;
    absl::Status status =
        SetClusterPolicy(cluster->coordinator_address(), o, r.push_spec, r.pull_spec);
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
                       {"gbps_fp32", GigabytesPerSecond(run.fp32_bytes, median)},
                       {"bytes_pushed_per_step", pushed},
                       {"step_seconds", wall}});
    WriteLine(os, absl::StrFormat("%-7d %4d  %10.1f  %10.1f  %10.1f  %12.3f  %14d  %8.2f", w,
                                  run.ranks[w], 1e3 * median, 1e3 * p90, 1e3 * Median(daemon),
                                  GigabytesPerSecond(run.fp32_bytes, median), pushed,
                                  pushed > 0 ? run.fp32_bytes / static_cast<double>(pushed) : 0));
  }
  const double slowest_median = *std::max_element(all_medians.begin(), all_medians.end());
  const double pp_gbps = GigabytesPerSecond(run.fp32_bytes, slowest_median);
  const double wire_gbps = GigabytesPerSecond(bytes_pushed, slowest_median);

  // ---- the cost of data-plane authentication: the same steps on more
  // clusters, the setting alternating in pairs (ABBA: on/off, off/on, ...)
  // so that neither setting always runs first or on a warmer machine.
  json auth = {{"on", o.auth}, {"mac", o.auth ? o.mac : "off"}};
  if (o.auth_compare) {
    // The daemons' CPU per step: what the MACs cost where the daemons' CPU
    // is the bottleneck, far less sensitive than wall time to other load.
    auto daemon_cpu = [&](const ClusterRun& r) {
      return (Growth(r.cpu_start.workers, r.cpu_end.workers, &ProcessUsage::cpu_s) +
              Growth(r.cpu_start.servers, r.cpu_end.servers, &ProcessUsage::cpu_s)) /
             std::max(1, o.steps);
    };
    struct Measured {
      double gbps, cpu_s;
    };
    const Measured first = {pp_gbps, daemon_cpu(run)};
    std::vector<double> wall_ratios, cpu_ratios;
    bool others_identical = true;  // every rank got the same bits in every compared cluster
    json pairs = json::array();
    for (int pair = 0; pair < o.auth_rounds; ++pair) {
      // Pair k runs o.auth first when k is even; the first pair's first
      // run is `run` above.
      Measured m[2];
      bool setting[2] = {pair % 2 == 0 ? o.auth : !o.auth, pair % 2 == 0 ? !o.auth : o.auth};
      for (int i = 0; i < 2; ++i) {
        if (pair == 0 && i == 0) {
          m[0] = first;
          continue;
        }
        ClusterRun other;
        init_run(other);
        absl::Status other_stopped;
        GIFT_RETURN_IF_ERROR(run_cluster(setting[i], other, other_stopped));
        others_identical = others_identical && other.identical_bits;
        m[i] = {GigabytesPerSecond(other.fp32_bytes, SlowestMedian(other)), daemon_cpu(other)};
      }
      const Measured& on = setting[0] ? m[0] : m[1];
      const Measured& off = setting[0] ? m[1] : m[0];
      // Ratio: null where a figure is not positive (no step timed).
      const json wall = Ratio(on.gbps, off.gbps), cpu = Ratio(off.cpu_s, on.cpu_s);
      if (wall.is_number()) wall_ratios.push_back(wall.get<double>());
      if (cpu.is_number()) cpu_ratios.push_back(cpu.get<double>());
      pairs.push_back({{"first", setting[0] ? "with" : "without"},
                       {"gbps_fp32_with_macs", on.gbps},
                       {"gbps_fp32_without_macs", off.gbps},
                       {"ratio_with_to_without", wall},
                       {"daemon_cpu_s_per_step_with_macs", on.cpu_s},
                       {"daemon_cpu_s_per_step_without_macs", off.cpu_s},
                       {"cpu_ratio_without_to_with", cpu}});
      os << absl::StrFormat(
          "data-plane authentication, pair %d of %d (%s first): push-pull %.3f GB/s FP32 with "
          "MACs, %.3f without; with / without = %s; daemons' CPU per timed step %.1f ms with, "
          "%.1f ms without; without / with = %s\n",
          pair + 1, o.auth_rounds, setting[0] ? "with" : "without", on.gbps, off.gbps,
          RatioText(wall), 1e3 * on.cpu_s, 1e3 * off.cpu_s, RatioText(cpu));
    }
    auto median = [](const std::vector<double>& ratios) {
      return ratios.empty() ? json(nullptr) : json(Median(ratios));
    };
    auth["mac"] = o.mac;
    auth["pairs"] = pairs;
    auth["ratio_with_to_without"] = median(wall_ratios);
    auth["cpu_ratio_without_to_with"] = median(cpu_ratios);
    auth["identical_bits_with_other"] = others_identical;
    os << absl::StrFormat(
        "data-plane authentication (%s on every chunk): with / without = %s (the median of "
        "%d pairs' push-pull throughput, slowest worker's median step); daemons' CPU without / "
        "with = %s\n",
        o.mac, RatioText(auth["ratio_with_to_without"]), o.auth_rounds,
        RatioText(auth["cpu_ratio_without_to_with"]));
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
      {"gradient_error_2d", run.gradient_error_2d},
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
      "(timed + measured steps): %s; transformed tensors %d of %d; 2-D gradient error %.3e\n",
      run.workers[0].samples.back().step, run.max_service_error, run.max_service_error_tensor,
      run.max_local_error, bound, u_push, u_pull,
      bound > 0 ? absl::StrFormat("%.3f", run.max_service_error / bound) : "n/a",
      run.identical_bits ? "yes" : "NO", run.workers[0].samples.back().transformed,
      static_cast<int>(run.tensors.size()), run.gradient_error_2d);
  if (o.mode == "gift" && !run.all_transformed) {
    os << "note: not every 2-D tensor was transformed when timing began (raise --max-warmup)\n";
  }
  if (o.device_tensors) {
    const bool within = run.max_local_error <= bound;
    correctness["device_tensors"] = {{"identical_bits", run.identical_bits},
                                     {"within_bound_of_exact_average", within}};
    os << absl::StrFormat(
        "device tensors (CUDA IPC): bit-identical across workers: %s, within the codec bound of "
        "the exact average: %s (%.3e computed here, bound %.3e)\n",
        run.identical_bits ? "yes" : "NO", within ? "yes" : "NO", run.max_local_error, bound);
  }

  // ---- baselines, in the same run
  const PushPullThroughput pp{.fp32_gbps = pp_gbps,
                              .wire_gbps = wire_gbps,
                              .bytes_pushed_per_step = bytes_pushed,
                              .fp32_bytes_per_step = static_cast<double>(run.fp32_bytes)};
  const BaselineReport perftest = PerftestBaseline(o, run.push_spec, pp);
  const BaselineReport gloo = GlooBaseline(o, run.tensors, pp, os);
  const BaselineReport reducer = ReducerBaseline(o, run.push_spec, run.pull_spec);

  // ---- the summary table
  os << "\nthroughput per worker, GB/s of FP32 gradient (" << run.fp32_bytes << " B per step)\n";
  WriteLine(os,
            absl::StrFormat("%-52s  %10s  %10s  %s", "", "GB/s", "median ms", "push-pull / this"));
  WriteLine(os, absl::StrFormat("%-52s  %10.3f  %10.1f  %s",
                                absl::StrCat("gift push-pull (", o.mode, ", slowest worker)"),
                                pp_gbps, 1e3 * slowest_median, ""));
  WriteLine(os, absl::StrFormat("%-52s  %10.3f  %10s  %s",
                                "  same, bytes on the wire (pushed only)", wire_gbps, "", ""));
  for (const BaselineReport* b : {&gloo, &perftest, &reducer}) {
    for (const std::string& line : b->summary_lines) WriteLine(os, line);
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
                {"selection", o.mode == "gift" ? json(o.selection) : json(nullptr)},
                {"gift_budget", o.mode == "gift" && o.selection == "measured" ? json(o.gift_budget)
                                                                              : json(nullptr)},
                {"statistics", o.mode == "gift" ? json(o.statistics) : json(nullptr)},
                {"rotation_block", o.rotation_block},
                {"gradients", o.gradients},
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
              {"ucx_perftest", perftest.json},
              {"gloo", gloo.json},
              {"reducer", reducer.json}};
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
  app->add_option("--statistics", o->statistics,
                  "gift mode: the reduced gradient's statistics, sketch (the default) or exact")
      ->check(CLI::IsMember({"sketch", "exact"}))
      ->capture_default_str();
  app->add_option("--gradients", o->gradients,
                  "synthetic gradients: field (a rolled Gaussian field with column profiles) or "
                  "low-rank (plus a component in a fixed 16-dimensional subspace per matrix, as "
                  "real gradients have: what a learned basis can use)")
      ->check(CLI::IsMember({"field", "low-rank"}))
      ->capture_default_str();
  app->add_option("--selection", o->selection,
                  "gift mode: list (every 2-D tensor transformed at the policy's rank) or "
                  "measured (the owners' choice by measurement, under --gift-budget)")
      ->check(CLI::IsMember({"list", "measured"}))
      ->capture_default_str();
  app->add_option("--gift-budget", o->gift_budget,
                  "gift mode, measured selection: auto, off or a fraction of the step")
      ->capture_default_str();
  app->add_option("--rotation-block", o->rotation_block,
                  "rotate each row in blocks of this many elements after the transform "
                  "(the policy's transform.rotation_block; 0: off)")
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
  app->add_flag("--device-tensors", o->device_tensors,
                "gradients in device memory registered by CUDA IPC (a GPU and a CUDA build)");
  app->add_flag("--auth-compare", o->auth_compare,
                "then a second cluster with the other --auth setting, the same steps, and the "
                "throughput ratio with / without MACs");
  app->add_option("--auth-rounds", o->auth_rounds,
                  "--auth-compare: pairs of clusters, the setting alternating (on/off, off/on, "
                  "...); the ratio is the pairs' median")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app->add_option("--mac", o->mac, "the MAC with --auth (gift-coordinator --dataplane-mac)")
      ->check(CLI::IsMember(dataplane::MacAlgorithmNames()))
      ->capture_default_str();
  app->add_option("--json", o->json_path,
                  "write the numbers as JSON to this file ('-': stdout, table on stderr)");
  return Command{app, [o] { return RunClusterBench(*o); }};
}

}  // namespace gift::bench
