#include "bench/soak.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/exact_counts.h"
#include "bench/fault_spoofer.h"
#include "bench/fault_tools.h"
#include "bench/soak_report.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "common/daemon/daemon_flags.h"
#include "gift/v1/policy.pb.h"
#include "tools/gift-cluster/local_cluster.h"
#include "tools/gift-cluster/subprocess.h"
#include "worker/client/worker_client.h"

namespace gift::bench {
namespace {

using Clock = std::chrono::steady_clock;
// A PushPull's reply and when it came.
struct StepReply {
  absl::StatusOr<client::PushPullResult> result;
  Clock::time_point at;
};
using StepCall = std::future<StepReply>;

constexpr int64_t kExactRows = 64, kExactCols = 256, kGiftDim = 256;

struct SoakOptions {
  std::string duration = "30m";
  uint64_t max_steps = 1'000'000;
  int workers = 4;
  int servers = 2;
  double fault_every_s = 6;
  std::string kinds = "all";
  std::string hierarchy = "node";
  uint64_t seed = 1;
  double gift_bound = 0.25;
  double sample_s = 10;
  std::string json;
  std::string dir;
  // Partitions: the daemons' placement and the namespace of the bridge whose
  // ports ("s<i>", "w<i>") are taken down (scripts/netlab.sh).
  std::string placement;
  std::string bridge_netns;
};

// Kinds whose victim is a worker that does not call the fault's step.
bool HitsAWorker(absl::string_view kind) {
  return absl::StartsWith(kind, "worker-") || kind == "coordinator-disk-full";
}

// Worker w's gradient of soak.gift at `step`, element i: fixed, so the
// exact average of any set of workers is known.
float GiftGradient(int w, uint64_t step, size_t i) {
  const double row = static_cast<double>(i / kGiftDim), col = static_cast<double>(i % kGiftDim);
  return static_cast<float>(std::sin(0.05 * col * (w + 1) + 0.3 * static_cast<double>(step)) +
                            0.5 * std::cos(0.03 * row * (w + 2)) + 0.1 * (w + 1));
}

// One training process: its client, tensors, and the step it may call next
// at the earliest (a joiner's admit step).
struct SoakTrainer {
  std::unique_ptr<client::WorkerClient> client;
  std::vector<client::SharedTensor> tensors;  // soak.exact, soak.gift
  uint64_t admit = 0;
  bool stopped = false;  // SIGSTOPped, resumed after the step
  bool down = false;     // its daemon could not be restarted yet
  // Killed and restarted, or stopped and resumed, and no step completed
  // since: its calls are refused with the step it is admitted at.
  bool rejoining = false;
};

absl::StatusOr<gift::v1::Policy> SoakPolicy(bool node) {
  absl::StatusOr<codec::CodecSpec> fp8 = codec::ParseCodecSpec("e4m3/block128");
  absl::StatusOr<codec::CodecSpec> fp32 = codec::ParseCodecSpec("fp32");
  if (!fp8.ok()) return fp8.status();
  if (!fp32.ok()) return fp32.status();
  gift::v1::Policy policy;
  gift::v1::TransformPolicy* t = policy.mutable_transform();
  *t->mutable_push_codec() = codec::ToProto(*fp8);
  *t->mutable_pull_codec() = codec::ToProto(*fp8);
  t->set_rank(16);
  t->set_error_feedback(!node);  // HIERARCHY_NODE refuses error feedback
  policy.mutable_refresh()->set_period_steps(10);
  policy.mutable_refresh()->set_drift_threshold(0.2);
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  policy.mutable_selection()->add_include("soak.gift");
  gift::v1::TensorOverride* exact = policy.add_overrides();
  exact->set_glob("soak.exact");
  exact->set_enabled(false);
  *exact->mutable_push_codec() = codec::ToProto(*fp32);
  *exact->mutable_pull_codec() = codec::ToProto(*fp32);
  policy.set_hierarchy(node ? gift::v1::HIERARCHY_NODE : gift::v1::HIERARCHY_NONE);
  return policy;
}

class Soak {
 public:
  Soak(const SoakOptions& o, tools::LocalClusterBinaries binaries, std::string dir)
      : o_(o), binaries_(std::move(binaries)), dir_(std::move(dir)), random_(o.seed) {
    totals_.hierarchy = o.hierarchy;
    totals_.gift_bound = o.gift_bound;
  }

  absl::Status Run() {
    absl::Duration duration;
    if (!absl::ParseDuration(o_.duration, &duration) || duration <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("--duration: '", o_.duration, "'"));
    }
    absl::StatusOr<std::vector<std::string>> kinds =
        SelectFaultKinds(o_.kinds, !o_.placement.empty() && !o_.bridge_netns.empty());
    if (!kinds.ok()) return kinds.status();
    kinds_ = *std::move(kinds);
    if (o_.hierarchy != "node" && o_.hierarchy != "none") {
      return absl::InvalidArgumentError("--hierarchy: node or none");
    }
    if (absl::Status s = Start(); !s.ok()) return s;
    start_ = Clock::now();
    const Clock::time_point end = start_ + absl::ToChronoNanoseconds(duration);
    ScheduleNextFault();
    Clock::time_point next_sample = start_;
    for (step_ = 0; step_ < o_.max_steps && Clock::now() < end; ++step_) {
      if (Clock::now() >= next_sample) {
        SampleDaemons();
        next_sample += std::chrono::milliseconds(static_cast<int64_t>(o_.sample_s * 1000));
      }
      if (absl::Status s = RestartExited(); !s.ok()) return s;
      if (absl::Status s = Step(); !s.ok()) return s;
    }
    SampleDaemons();
    totals_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    totals_.coordinator_rollbacks =
        CountLogEvents(absl::StrCat(dir_, "/logs/coordinator.log"), "rolled_back");
    PrintSoakReport(totals_, faults_, samples_);
    if (!o_.json.empty()) {
      if (absl::Status s = WriteSoakJson(o_.json, totals_, faults_, samples_); !s.ok()) return s;
    }
    (void)cluster_->Stop(absl::Seconds(10));
    return totals_.clean() ? absl::OkStatus()
                           : absl::DataLossError(
                                 "the soak found lost, double, failed or out-of-bound "
                                 "steps (above)");
  }

 private:
  absl::Status Start() {
    tools::LocalClusterOptions options;
    options.binaries = binaries_;
    options.dir = dir_;
    options.servers = o_.servers;
    options.workers = o_.workers;
    options.lease_ttl = absl::Seconds(10);
    options.step_timeout = absl::Seconds(60);
    options.coordinator_args = {"--chunk-bytes", "16384", "--dataplane-auth"};
    if (!o_.placement.empty()) {
      if (absl::Status s = PlaceCluster(o_.placement, options); !s.ok()) return s;
    }
    if (std::find(kinds_.begin(), kinds_.end(), "coordinator-disk-full") != kinds_.end()) {
      // The coordinator's state (and its data-plane secret) on a tmpfs over
      // the run directory, in a mount namespace that outlives each
      // coordinator process, so a restart finds its state.
      absl::StatusOr<std::unique_ptr<PrivateTmpfs>> tmpfs = PutCoordinatorOnTmpfs(16, options);
      if (!tmpfs.ok()) return tmpfs.status();
      tmpfs_ = *std::move(tmpfs);
    }
    for (int w = 0; w < o_.workers; ++w) options.worker_nodes.push_back(absl::StrCat("n", w / 2));
    absl::StatusOr<std::unique_ptr<tools::LocalCluster>> cluster =
        tools::LocalCluster::Start(options);
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    absl::StatusOr<gift::v1::Policy> policy = SoakPolicy(o_.hierarchy == "node");
    if (!policy.ok()) return policy.status();
    control::CoordinatorClient coordinator(
        control::CoordinatorClient::MakeChannel(cluster_->coordinator_address()),
        absl::Seconds(30));
    if (auto set = coordinator.SetPolicy(*policy, 0); !set.ok()) return set.status();
    trainers_.resize(o_.workers);
    for (int w = 0; w < o_.workers; ++w) {
      if (absl::Status s = Connect(w); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A training process attaches to worker w's daemon and registers.
  absl::Status Connect(int w) {
    SoakTrainer& t = trainers_[w];
    t.tensors.clear();
    t.client.reset();
    auto c = client::WorkerClient::Connect(cluster_->worker_socket(w));
    if (!c.ok()) return c.status();
    t.client = *std::move(c);
    auto tensors = t.client->Register(
        {{"soak.exact", {kExactRows, kExactCols}}, {"soak.gift", {kGiftDim, kGiftDim}}});
    if (!tensors.ok()) return tensors.status();
    t.tensors = *std::move(tensors);
    return absl::OkStatus();
  }

  void ScheduleNextFault() {
    std::exponential_distribution<double> gap(1.0 / o_.fault_every_s);
    next_fault_ =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(gap(random_) * 1000));
  }

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(random_); }

  StepCall Call(int w) {
    SoakTrainer& t = trainers_[w];
    std::fill_n(t.tensors[0].data(), t.tensors[0].size(), ExactValue(w));
    float* g = t.tensors[1].data();
    for (size_t i = 0; i < t.tensors[1].size(); ++i) g[i] = GiftGradient(w, step_, i);
    const uint64_t step = step_;
    return std::async(std::launch::async, [&t, step] {
      absl::StatusOr<client::PushPullResult> r = t.client->PushPull(step);
      return StepReply{std::move(r), Clock::now()};
    });
  }

  // One step on the workers that may call it, with a fault if one is due.
  absl::Status Step() {
    std::vector<int> callers;
    for (int w = 0; w < o_.workers; ++w) {
      const SoakTrainer& t = trainers_[w];
      if (!t.stopped && !t.down && step_ >= t.admit) callers.push_back(w);
    }
    std::optional<SoakFault> fault;
    if (Clock::now() >= next_fault_ && callers.size() >= 3) {
      fault = SoakFault{.kind = kinds_[Pick(static_cast<int>(kinds_.size()))], .step = step_};
      ScheduleNextFault();
    }
    std::map<int, StepCall> calls;
    Clock::time_point t0 = Clock::now();
    if (!fault) {
      for (int w : callers) calls[w] = Call(w);
    } else if (HitsAWorker(fault->kind)) {
      fault->victim = callers[Pick(static_cast<int>(callers.size()))];
      callers.erase(std::find(callers.begin(), callers.end(), fault->victim));
      for (int w : callers) calls[w] = Call(w);
      absl::SleepFor(absl::Milliseconds(100));
      t0 = Clock::now();
      if (absl::Status s = InjectIntoWorker(*fault); !s.ok()) return s;
    } else if (fault->kind == "spoof") {
      absl::StatusOr<std::unique_ptr<FaultSpoofer>> spoofer = FaultSpoofer::Create();
      if (!spoofer.ok()) return spoofer.status();
      absl::StatusOr<int> sent = (*spoofer)->SendForgedPushes(
          cluster_->coordinator_address(), trainers_[callers[0]].tensors[0].tensor_id(), step_, 0,
          ExactValue(o_.workers));
      if (!sent.ok()) ++totals_.spoof_errors;
      for (int w : callers) calls[w] = Call(w);
    } else {
      // server-* and coordinator-*: all but the last caller wait in the step.
      for (size_t i = 0; i + 1 < callers.size(); ++i) calls[callers[i]] = Call(callers[i]);
      absl::SleepFor(absl::Milliseconds(100));
      t0 = Clock::now();
      if (absl::Status s = Inject(*fault); !s.ok()) return s;
      calls[callers.back()] = Call(callers.back());
    }
    // The stall: from the fault to the step's last result. A call refused
    // because its worker must join again (a victim of an earlier fault) is
    // not waited for by anyone, so it counts only when no call got a result.
    Clock::time_point last_result = t0, last_reply = t0;
    bool any_result = false;
    std::map<int, absl::StatusOr<client::PushPullResult>> results;
    for (auto& [w, call] : calls) {
      StepReply reply = call.get();
      last_reply = std::max(last_reply, reply.at);
      if (reply.result.ok()) {
        any_result = true;
        last_result = std::max(last_result, reply.at);
      }
      results.emplace(w, std::move(reply.result));
    }
    const Clock::time_point last = any_result ? last_result : last_reply;
    Check(results);
    if (fault) {
      fault->stall_s = std::chrono::duration<double>(last - t0).count();
      faults_.push_back(*fault);
      return Repair(*fault);
    }
    return absl::OkStatus();
  }

  // The victim worker is killed, stopped or partitioned while the others
  // wait in the step. coordinator-disk-full: the coordinator's disk fills
  // up, then the victim is killed (its eviction needs a commit); space
  // comes back 1 s later.
  absl::Status InjectIntoWorker(const SoakFault& fault) {
    const int w = fault.victim;
    if (fault.kind == "worker-kill") return cluster_->KillWorker(w);
    if (fault.kind == "worker-stop") {
      trainers_[w].stopped = true;
      return cluster_->worker(w)->Signal(SIGSTOP);
    }
    if (fault.kind == "worker-partition") {
      trainers_[w].stopped = true;
      return SetBridgePort(o_.bridge_netns, absl::StrCat("w", w), false);
    }
    const std::string fill = tmpfs_->path("fill");
    if (absl::Status s = FillDisk(fill); !s.ok()) return s;
    resume_ = std::async(std::launch::async, [fill] {
      absl::SleepFor(absl::Seconds(1));
      std::error_code ec;
      std::filesystem::remove(fill, ec);
    });
    return cluster_->KillWorker(w);
  }

  // A server (killed, stopped or partitioned) or the coordinator (killed
  // and restarted, or stopped) while all but one worker wait in the step.
  absl::Status Inject(SoakFault& fault) {
    if (absl::StartsWith(fault.kind, "server-")) {
      fault.victim = Pick(o_.servers);
      if (fault.kind == "server-partition") {
        return SetBridgePort(o_.bridge_netns, absl::StrCat("s", fault.victim), false);
      }
      return cluster_->server(fault.victim)
          ->Signal(fault.kind == "server-kill" ? SIGKILL : SIGSTOP);
    }
    if (fault.kind == "coordinator-kill") return cluster_->RestartCoordinator();
    // coordinator-stop: resumed 1 s later, well within the lease and the
    // step window.
    if (::kill(cluster_->coordinator()->pid(), SIGSTOP) != 0) {
      return absl::InternalError("kill(coordinator, SIGSTOP) failed");
    }
    resume_ = std::async(std::launch::async, [this] {
      absl::SleepFor(absl::Seconds(1));
      ::kill(cluster_->coordinator()->pid(), SIGCONT);
    });
    return absl::OkStatus();
  }

  // A supervisor's restart of every worker or server that exited on its
  // own (no fault injected it): counted and named as a crash.
  absl::Status RestartExited() {
    for (int w = 0; w < o_.workers; ++w) {
      absl::StatusOr<int> code = cluster_->worker(w)->WaitForExit(absl::ZeroDuration());
      if (!code.ok()) continue;  // running
      if (!trainers_[w].down) RecordCrash(cluster_->worker_name(w), *code);
      trainers_[w].stopped = false;
      RestartWorker(w);
    }
    for (int i = 0; i < o_.servers; ++i) {
      absl::StatusOr<int> code = cluster_->server(i)->WaitForExit(absl::ZeroDuration());
      if (!code.ok()) continue;
      if (!servers_down_.contains(i)) RecordCrash(cluster_->server_name(i), *code);
      RestartServer(i);
    }
    return absl::OkStatus();
  }

  void RecordCrash(const std::string& daemon, int code) {
    totals_.crashes.push_back(absl::StrCat("step ", step_, ": ", daemon, " exited with ", code,
                                           " (log: ", dir_, "/logs/", daemon, ".log)"));
  }

  // A supervisor's restart of worker w's daemon and its training process.
  // A daemon that cannot start (e.g. ALREADY_EXISTS: the coordinator still
  // holds the old member under its name until it is evicted) is tried again
  // before later steps, as a supervisor restarts with a backoff, and its
  // worker sits the steps out meanwhile.
  void RestartWorker(int w) {
    SoakTrainer& t = trainers_[w];
    t.rejoining = true;
    absl::Status s = cluster_->RestartWorker(w);
    if (s.ok()) s = Connect(w);
    if (!t.down && !s.ok()) ++totals_.restart_retries;
    t.down = !s.ok();
  }

  void RestartServer(int i) {
    const bool ok = cluster_->RestartServer(i).ok();
    if (ok) {
      servers_down_.erase(i);
    } else if (servers_down_.insert(i).second) {
      ++totals_.restart_retries;
    }
  }

  // What an operator's supervisor does after the fault; a partition is
  // mended by bringing the host's port up again. A stopped daemon that
  // exited meanwhile (SIGCONT then fails) is restarted by RestartExited
  // before the next step.
  absl::Status Repair(const SoakFault& fault) {
    if (resume_.valid()) resume_.wait();
    const std::string& kind = fault.kind;
    if (kind == "worker-kill" || kind == "coordinator-disk-full") {
      RestartWorker(fault.victim);
      return absl::OkStatus();
    }
    if (kind == "worker-stop" || kind == "worker-partition") {
      trainers_[fault.victim].stopped = false;
      trainers_[fault.victim].rejoining = true;
      if (kind == "worker-partition") {
        return SetBridgePort(o_.bridge_netns, absl::StrCat("w", fault.victim), true);
      }
      (void)cluster_->worker(fault.victim)->Signal(SIGCONT);
    }
    if (kind == "server-kill") RestartServer(fault.victim);
    if (kind == "server-stop") (void)cluster_->server(fault.victim)->Signal(SIGCONT);
    if (kind == "server-partition") {
      return SetBridgePort(o_.bridge_netns, absl::StrCat("s", fault.victim), true);
    }
    return absl::OkStatus();
  }

  // The step's replies: every worker that returned a result must see every
  // caller that returned one counted once, and no one else.
  void Check(std::map<int, absl::StatusOr<client::PushPullResult>>& results) {
    ++totals_.steps;
    std::vector<int> answered, callers;
    for (auto& [w, r] : results) {
      callers.push_back(w);
      if (r.ok()) {
        answered.push_back(w);
        trainers_[w].rejoining = false;
        continue;
      }
      // A worker evicted (by a fault, or found gone) joins again at the
      // step the coordinator admits it at.
      static const std::regex admitted("admitted at step ([0-9]+)");
      std::smatch m;
      const std::string message(r.status().message());
      if (absl::IsFailedPrecondition(r.status()) && std::regex_search(message, m, admitted)) {
        trainers_[w].admit = std::stoull(m[1]);
        // A victim may be refused more than once before its first step (a
        // coordinator restart forgets a joiner, which then joins again).
        if (trainers_[w].rejoining) {
          ++totals_.rejoins;
        } else {
          ++totals_.refused;
          RecordError(w, r.status());
        }
        continue;
      }
      ++totals_.failed;
      RecordError(w, r.status());
    }
    // Every worker that got a result must be counted once in it; a caller
    // whose own call failed may be counted too (its push arrived, its
    // result did not: a failed call, counted above), no one else.
    bool step_bad = false;
    for (int w : answered) {
      const client::PushPullResult& r = *results.at(w);
      absl::StatusOr<std::vector<std::vector<int>>> counts =
          Counts(trainers_[w].tensors[0], r.world_size, o_.workers);
      if (!counts.ok()) {
        ++totals_.doubled;
        step_bad = true;
        RecordError(w, counts.status());
        continue;
      }
      const CountCheck check = CheckCounts(*counts, answered, o_.workers, callers);
      totals_.lost += check.lost;
      totals_.doubled += check.doubled + (check.spoofed > 0 ? 1 : 0);
      step_bad |= check.lost + check.doubled > 0 || check.spoofed > 0;
      // soak.gift against the exact average of the workers counted (the
      // digits of soak.exact's first element).
      std::vector<int> counted;
      for (int v = 0; v < o_.workers; ++v) {
        if (!counts->empty() && (*counts)[0][v] == 1) counted.push_back(v);
      }
      if (counted.empty()) continue;  // lost, counted above
      double err = 0, norm = 0;
      const float* got = trainers_[w].tensors[1].data();
      for (size_t i = 0; i < trainers_[w].tensors[1].size(); ++i) {
        double want = 0;
        for (int v : counted) want += GiftGradient(v, step_, i);
        want /= static_cast<double>(counted.size());
        err += (got[i] - want) * (got[i] - want);
        norm += want * want;
      }
      const double rel = norm > 0 ? std::sqrt(err / norm) : 0;
      totals_.gift_max_rel_error = std::max(totals_.gift_max_rel_error, rel);
      if (rel > o_.gift_bound) ++totals_.gift_out_of_bound;
    }
    if (step_bad) totals_.bad_steps.push_back(step_);
    totals_.steps_completed += answered.empty() ? 0 : 1;
  }

  void RecordError(int w, const absl::Status& s) {
    if (totals_.errors.size() < 20) {
      totals_.errors.push_back(absl::StrCat("step ", step_, " worker ", w, ": ", s.ToString()));
    }
  }

  void SampleDaemons() {
    const double t = std::chrono::duration<double>(Clock::now() - start_).count();
    auto add = [&](const std::string& name, int pid) {
      samples_.push_back(SampleDaemon(t, name, pid));
    };
    add("coordinator", cluster_->coordinator()->pid());
    for (int s = 0; s < o_.servers; ++s) add(cluster_->server_name(s), cluster_->server(s)->pid());
    for (int w = 0; w < o_.workers; ++w) add(cluster_->worker_name(w), cluster_->worker(w)->pid());
  }

  const SoakOptions o_;
  const tools::LocalClusterBinaries binaries_;
  const std::string dir_;
  std::mt19937_64 random_;
  std::vector<std::string> kinds_;
  std::unique_ptr<PrivateTmpfs> tmpfs_;  // coordinator-disk-full: under the state file
  std::unique_ptr<tools::LocalCluster> cluster_;
  std::vector<SoakTrainer> trainers_;
  Clock::time_point start_, next_fault_;
  std::future<void> resume_;
  uint64_t step_ = 0;
  std::set<int> servers_down_;  // servers that could not be restarted yet
  SoakTotals totals_;
  std::vector<SoakFault> faults_;
  std::vector<DaemonSample> samples_;
};

absl::Status RunSoak(const SoakOptions& o) {
  absl::StatusOr<tools::LocalClusterBinaries> binaries =
      tools::LocalClusterBinaries::NextTo(SelfPath());
  if (!binaries.ok()) return binaries.status();
  std::string dir = o.dir;
  if (dir.empty()) {
    char pattern[] = "/tmp/gift-soak-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
    dir = pattern;
  }
  std::printf("soak: run directory %s (daemon logs under logs/)\n", dir.c_str());
  absl::Status status;
  {
    Soak soak(o, *std::move(binaries), dir);
    status = soak.Run();
  }  // its daemons and its tmpfs are gone
  if (o.dir.empty() && status.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::printf("soak: clean; run directory removed\n");
  }
  return status;
}

}  // namespace

Command AddSoakCommand(CLI::App& parent) {
  auto o = std::make_shared<SoakOptions>();
  CLI::App* app = parent.add_subcommand(
      "soak",
      "one cluster with every feature on (GIFT, refreshes, MACs, node-local aggregation) under "
      "random faults and their repairs, every step checked exactly; RSS and fds over time");
  app->add_option("--duration", o->duration, "how long to run (e.g. 30m, 90s)")
      ->capture_default_str();
  app->add_option("--max-steps", o->max_steps, "stop after this many steps")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  app->add_option("--workers", o->workers, "gift-worker daemons (two per node group)")
      ->check(CLI::Range(3, 12))
      ->capture_default_str();
  app->add_option("--servers", o->servers, "gift-server shards")
      ->check(CLI::Range(2, 16))
      ->capture_default_str();
  app->add_option("--fault-every", o->fault_every_s, "mean seconds between faults")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app->add_option("--kinds", o->kinds,
                  "comma-separated fault kinds drawn from, or all: every kind this run can "
                  "inject (coordinator-disk-full needs root, partitions --bridge-netns)")
      ->capture_default_str();
  app->add_option("--hierarchy", o->hierarchy,
                  "node: node-local aggregation, error feedback off (the policy refuses both); "
                  "none: error feedback on")
      ->capture_default_str();
  app->add_option("--seed", o->seed, "seed of the fault draws")->capture_default_str();
  app->add_option("--gift-bound", o->gift_bound,
                  "largest relative error of soak.gift's average accepted")
      ->capture_default_str();
  app->add_option("--sample", o->sample_s, "seconds between RSS / fd samples")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
  app->add_option("--json", o->json, "write the results (every fault and sample) to this file");
  app->add_option("--dir", o->dir,
                  "run directory (default: a new one under /tmp, removed after a clean run)");
  app->add_option("--placement", o->placement,
                  "the daemons' placement JSON (scripts/netlab.sh exec's NETLAB_PLACEMENT); "
                  "UCX over TCP");
  app->add_option("--bridge-netns", o->bridge_netns,
                  "the netlab bridge namespace (PREFIX-br): enables worker-partition and "
                  "server-partition, which take a host's bridge port down for the step");
  return {app, [o] { return RunSoak(*o); }};
}

}  // namespace gift::bench
