#include "bench/cluster_run.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "common/policy/policy.h"

namespace gift::bench {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

absl::Status SetClusterPolicy(const std::string& address, const ClusterBenchOptions& o,
                              const codec::CodecSpec& push, const codec::CodecSpec& pull) {
  control::CoordinatorClient client(control::CoordinatorClient::MakeChannel(address),
                                    absl::Seconds(30));
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(push);
  *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(pull);
  policy.mutable_transform()->set_rotation_block(o.rotation_block);
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  if (o.mode == "gift" && o.selection == "measured") {
    policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_MEASURED);
    absl::StatusOr<std::optional<double>> budget = policy::ParseGiftBudget(o.gift_budget);
    if (!budget.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--gift-budget: ", budget.status().message()));
    }
    if (budget->has_value()) policy.mutable_selection()->set_gift_budget(**budget);
  } else if (o.mode == "gift") {
    policy.mutable_selection()->add_include("*");  // every 2-D tensor, always
  }
  if (o.mode == "gift") {
    policy.mutable_refresh()->set_period_steps(o.period);
    if (o.source == "per-worker") {  // sketches exchanged on every step (collect period 1)
      policy.mutable_transform()->set_source(gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS);
    } else if (o.source != "gradients") {
      return absl::InvalidArgumentError(
          absl::StrCat("--source ", o.source, ": gradients or per-worker"));
    }
    policy.mutable_transform()->set_statistics(o.statistics == "exact"
                                                   ? gift::v1::STATISTICS_FORM_EXACT
                                                   : gift::v1::STATISTICS_FORM_SKETCH);
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
        WorkerState& ws = run.workers[w];
        if (!o.device_tensors) {
          auto tensors = ws.client->Register(specs);
          if (tensors.ok()) {
            ws.tensors = *std::move(tensors);
          } else {
            ws.error = tensors.status();
          }
          return;
        }
        auto device = DeviceGradients::Create(specs);
        if (!device.ok()) {
          ws.error = device.status();
          return;
        }
        ws.device = *std::move(device);
        ws.error = ws.client->Register({}, ws.device->specs()).status();
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
  GradientSource source(run.tensors, o.gradients == "low-rank" ? GradientShape::kLowRank
                                                                : GradientShape::kField);

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
        // Measured selection leaves some tensors direct: --warmup steps.
        const bool ready = o.mode != "gift" || o.selection == "measured" || transformed;
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
      for (size_t t = 0; t < run.tensors.size(); ++t) source.Fill(t, step, w, ws.gradient(t));
      if (current == Phase::kMeasure) {
        ws.inputs.clear();
        for (size_t t = 0; t < run.tensors.size(); ++t) {
          ws.inputs.emplace_back(ws.gradient(t), ws.gradient(t) + ws.elements(t));
        }
      }
      // Device tensors: the gradients' writes complete before PushPull.
      if (ws.device != nullptr && ws.error.ok()) ws.error = ws.device->Upload();
      ready_barrier.arrive_and_wait();
      const Clock::time_point start = Clock::now();
      absl::StatusOr<client::PushPullResult> result =
          ws.error.ok() ? ws.client->PushPull(step, current == Phase::kMeasure)
                        : absl::StatusOr<client::PushPullResult>(ws.error);
      const double wall = SecondsSince(start);
      // Device tensors: the averages, complete when PushPull returned.
      if (result.ok() && ws.device != nullptr) {
        if (absl::Status s = ws.device->Download(); !s.ok()) result = s;
      }
      StepSample sample{.phase = current, .step = step, .wall_s = wall};
      if (result.ok()) {
        sample.worker_s = result->seconds;
        for (const client::TensorResult& r : result->tensors) {
          sample.bytes_pushed += r.bytes_sent;
          sample.transformed += r.transformed ? 1 : 0;
        }
        uint64_t h = 0xCBF29CE484222325ull;
        for (size_t t = 0; t < run.tensors.size(); ++t) {
          h = HashFloats(ws.gradient(t), ws.elements(t), h);
        }
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
  double err_2d = 0, norm_2d = 0;
  for (size_t t = 0; t < run.tensors.size(); ++t) {
    const size_t n = run.tensors[t].elements();
    const float* got = run.workers[0].gradient(t);
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int w = 0; w < P; ++w) exact += run.workers[w].inputs[t][i];
      exact /= P;
      err += (got[i] - exact) * (got[i] - exact);
      norm += exact * exact;
    }
    const double rel = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
    if (run.tensors[t].matrix()) {
      err_2d += err;
      norm_2d += norm;
    }
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
  run.gradient_error_2d = norm_2d > 0 ? std::sqrt(err_2d / norm_2d) : 0.0;
  return absl::OkStatus();
}

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

}  // namespace gift::bench
