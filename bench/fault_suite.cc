#include "bench/fault_suite.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
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
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "gift/v1/policy.pb.h"
#include "nlohmann/json.hpp"
#include "tools/gift-cluster/local_cluster.h"
#include "tools/gift-cluster/subprocess.h"
#include "worker/client/worker_client.h"

namespace gift::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kFaultStep = 3;
constexpr uint64_t kSteps = 6;
constexpr int64_t kRows = 64, kCols = 256;

struct FaultOptions {
  std::string kinds = "all";
  int trials = 3;
  int workers = 3;
  int servers = 2;
  std::string lease = "10s";
  // Data-plane MACs on (the coordinator's --dataplane-auth; the default): a
  // forged push is then rejected, and the spoof kind is asserted like the
  // others. Off (--no-dataplane-auth): the loopback default of the daemons,
  // where the spoof kind is reported only.
  bool dataplane_auth = true;
  std::string max_stall;  // "" : no bound
  std::string json;
  std::string dir;  // "" : a fresh temporary directory
  // Partitions: the daemons' placement and the namespace of the bridge whose
  // ports ("s<i>", "w<i>") are taken down (scripts/netlab.sh).
  std::string placement;
  std::string bridge_netns;
};

// Kinds that report what happened without failing the suite: forged pushes
// are accepted when data-plane authentication is off.
bool ReportOnly(const std::string& kind, bool dataplane_auth) {
  return kind == "spoof" && !dataplane_auth;
}

struct TrialResult {
  std::string kind;
  int trial = 0;
  int lost = 0, doubled = 0, failed = 0;
  // spoof: forged pushes sent, and the fraction of elements of the fault
  // step's average that counted them (0: every forged push was rejected).
  int forged_sent = 0;
  double forged_counted = 0;
  double stall_s = 0;
  std::string error;  // setup problems or the first failed step's status
};

// One worker's training process: its client and registered tensor.
struct TrialTrainer {
  std::unique_ptr<client::WorkerClient> client;
  std::vector<client::SharedTensor> tensors;
};

absl::Status SetFp32Policy(const std::string& address) {
  control::CoordinatorClient client(control::CoordinatorClient::MakeChannel(address),
                                    absl::Seconds(30));
  absl::StatusOr<codec::CodecSpec> fp32 = codec::ParseCodecSpec("fp32");
  if (!fp32.ok()) return fp32.status();
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(*fp32);
  *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(*fp32);
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  policy.mutable_selection()->add_exclude("*");  // direct: exact FP32 sums
  absl::StatusOr<gift::v1::Policy> set = client.SetPolicy(policy, 0);
  return set.status();
}

class Trial {
 public:
  Trial(const FaultOptions& o, const tools::LocalClusterBinaries& binaries, std::string kind,
        int index, std::string dir)
      : o_(o), binaries_(binaries), dir_(std::move(dir)) {
    result_.kind = std::move(kind);
    result_.trial = index;
  }

  TrialResult Run() {
    if (absl::Status s = Setup(); !s.ok()) {
      result_.failed = 1;
      result_.error = s.ToString();
    } else {
      Steps();
    }
    Teardown();
    return result_;
  }

 private:
  absl::Status Setup() {
    absl::Duration lease;
    if (!absl::ParseDuration(o_.lease, &lease) || lease <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lease: '", o_.lease, "' is not a duration"));
    }
    tools::LocalClusterOptions options;
    options.binaries = binaries_;
    options.dir = dir_;
    options.servers = o_.servers;
    options.workers = o_.workers;
    options.lease_ttl = lease;
    options.step_timeout = absl::Seconds(60);
    options.coordinator_args = {"--chunk-bytes", "16384"};
    if (o_.dataplane_auth) options.coordinator_args.push_back("--dataplane-auth");
    if (!o_.placement.empty()) {
      if (absl::Status s = PlaceCluster(o_.placement, options); !s.ok()) return s;
    }
    if (result_.kind == "coordinator-disk-full") {
      // The state file on a 4 MiB tmpfs over the run directory, in a mount
      // namespace of its own (nothing changes outside it); Inject fills it.
      absl::StatusOr<std::unique_ptr<PrivateTmpfs>> tmpfs = PutCoordinatorOnTmpfs(4, options);
      if (!tmpfs.ok()) return tmpfs.status();
      tmpfs_ = *std::move(tmpfs);
    }
    absl::StatusOr<std::unique_ptr<tools::LocalCluster>> cluster =
        tools::LocalCluster::Start(options);
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    if (absl::Status s = SetFp32Policy(cluster_->coordinator_address()); !s.ok()) return s;
    trainers_.resize(o_.workers);
    for (int w = 0; w < o_.workers; ++w) {
      auto c = client::WorkerClient::Connect(cluster_->worker_socket(w));
      if (!c.ok()) return c.status();
      trainers_[w].client = *std::move(c);
      auto t = trainers_[w].client->Register({{"faults.grad", {kRows, kCols}}});
      if (!t.ok()) return t.status();
      trainers_[w].tensors = *std::move(t);
    }
    return absl::OkStatus();
  }

  // Starts PushPull(step) on worker w (its gradient filled first).
  std::future<absl::StatusOr<client::PushPullResult>> Start(int w, uint64_t step) {
    std::fill_n(trainers_[w].tensors[0].data(), trainers_[w].tensors[0].size(), ExactValue(w));
    return std::async(std::launch::async, [this, w, step] {
      absl::StatusOr<client::PushPullResult> r = trainers_[w].client->PushPull(step);
      done_[w] = Clock::now();
      return r;
    });
  }

  // Collects the step's replies and checks the counts against `expected`.
  void Check(std::map<int, std::future<absl::StatusOr<client::PushPullResult>>>& calls,
             const std::vector<int>& expected) {
    for (auto& [w, call] : calls) {
      absl::StatusOr<client::PushPullResult> r = call.get();
      if (!r.ok()) {
        ++result_.failed;
        if (result_.error.empty())
          result_.error = absl::StrCat("worker ", w, ": ", r.status().ToString());
        continue;
      }
      absl::StatusOr<std::vector<std::vector<int>>> counts =
          Counts(trainers_[w].tensors[0], r->world_size, o_.workers);
      if (!counts.ok()) {
        ++result_.doubled;
        if (result_.error.empty()) result_.error = counts.status().ToString();
        continue;
      }
      const CountCheck check = CheckCounts(*counts, expected, o_.workers);
      result_.lost += check.lost;
      result_.doubled += check.doubled;
      if (check.spoofed > 0) {
        // Counted someone who is no worker (the spoofer is expected to be
        // counted only without authentication).
        if (result_.kind != "spoof" || o_.dataplane_auth) ++result_.doubled;
        result_.forged_counted = std::max(result_.forged_counted, check.spoofed);
      }
    }
  }

  void Steps() {
    std::vector<int> all;
    for (int w = 0; w < o_.workers; ++w) all.push_back(w);
    std::vector<int> expected = all;
    const std::string& kind = result_.kind;
    for (uint64_t step = 0; step < kSteps; ++step) {
      std::map<int, std::future<absl::StatusOr<client::PushPullResult>>> calls;
      if (step != kFaultStep) {
        for (int w : expected) calls[w] = Start(w, step);
        Check(calls, expected);
        continue;
      }
      if (kind == "spoof") {  // forged pushes first, then every worker
        const Clock::time_point t0 = Clock::now();
        if (absl::Status s = Spoof(step); !s.ok()) {
          result_.failed = 1;
          result_.error = s.ToString();
          return;
        }
        for (int w : all) calls[w] = Start(w, step);
        for (auto& [w, c] : calls) c.wait();
        Clock::time_point last = t0;
        for (auto& [w, c] : calls) last = std::max(last, done_[w]);
        result_.stall_s = std::chrono::duration<double>(last - t0).count();
        Check(calls, expected);
        continue;
      }
      // The fault step: everyone but `late` is waiting when the fault hits.
      const int late = o_.workers - 1;
      for (int w : all) {
        if (w != late) calls[w] = Start(w, step);
      }
      absl::SleepFor(absl::Milliseconds(200));
      const Clock::time_point t0 = Clock::now();
      if (absl::Status s = Inject(kind); !s.ok()) {
        result_.failed = 1;
        result_.error = s.ToString();
        for (auto& [w, c] : calls) c.wait();
        return;
      }
      if (absl::StartsWith(kind, "worker") || kind == "coordinator-disk-full") {
        expected.erase(std::remove(expected.begin(), expected.end(), late), expected.end());
      } else {
        calls[late] = Start(late, step);
      }
      for (auto& [w, c] : calls) c.wait();
      Clock::time_point last = t0;
      for (auto& [w, c] : calls) last = std::max(last, done_[w]);
      result_.stall_s = std::chrono::duration<double>(last - t0).count();
      Check(calls, expected);
      if (kind == "coordinator-stop") (void)SignalCoordinator(SIGCONT);
    }
  }

  absl::Status Inject(const std::string& kind) {
    const int late = o_.workers - 1;
    if (kind == "worker-kill") return cluster_->KillWorker(late);
    if (kind == "worker-stop") {
      stopped_worker_ = late;
      return cluster_->worker(late)->Signal(SIGSTOP);
    }
    if (kind == "server-kill") {
      killed_server_ = 0;
      return cluster_->server(0)->Signal(SIGKILL);
    }
    if (kind == "server-stop") {
      killed_server_ = 0;  // SIGKILLed at teardown
      return cluster_->server(0)->Signal(SIGSTOP);
    }
    if (kind == "coordinator-kill") return cluster_->RestartCoordinator();
    if (kind == "coordinator-stop") {
      // Resumed 1 s later, well within the lease and the step window.
      absl::Status s = SignalCoordinator(SIGSTOP);
      if (!s.ok()) return s;
      resume_ = std::async(std::launch::async, [this] {
        absl::SleepFor(absl::Seconds(1));
        (void)SignalCoordinator(SIGCONT);
      });
      return absl::OkStatus();
    }
    if (IsPartition(kind)) {
      // The host's port on the bridge goes down: its packets are dropped
      // both ways, its connections stay open.
      partitioned_port_ = kind == "worker-partition" ? absl::StrCat("w", late) : "s0";
      return SetBridgePort(o_.bridge_netns, partitioned_port_, false);
    }
    if (kind == "coordinator-disk-full") {
      // Full disk under the coordinator, then a worker dies: its eviction
      // needs a commit. Space comes back 1 s later.
      const std::string fill = tmpfs_->path("fill");
      if (absl::Status s = FillDisk(fill); !s.ok()) return s;
      resume_ = std::async(std::launch::async, [fill] {
        absl::SleepFor(absl::Seconds(1));
        std::filesystem::remove(fill);
      });
      return cluster_->KillWorker(late);
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown fault kind '", kind, "'"));
  }

  // A non-member's forged pushes for the fault step: rank 0, 4^workers.
  absl::Status Spoof(uint64_t step) {
    absl::StatusOr<std::unique_ptr<FaultSpoofer>> spoofer = FaultSpoofer::Create();
    if (!spoofer.ok()) return spoofer.status();
    absl::StatusOr<int> sent = (*spoofer)->SendForgedPushes(
        cluster_->coordinator_address(), trainers_[0].tensors[0].tensor_id(), step, 0,
        static_cast<float>(uint64_t{1} << (2 * o_.workers)));
    if (!sent.ok()) return sent.status();
    result_.forged_sent = *sent;
    return absl::OkStatus();
  }

  absl::Status SignalCoordinator(int signal) {
    if (::kill(cluster_->coordinator()->pid(), signal) != 0) {
      return absl::InternalError(absl::StrCat("kill(coordinator, ", signal, ") failed"));
    }
    return absl::OkStatus();
  }

  void Teardown() {
    if (resume_.valid()) resume_.wait();
    if (cluster_ == nullptr) return;
    if (stopped_worker_ >= 0) (void)cluster_->KillWorker(stopped_worker_);
    if (!partitioned_port_.empty()) (void)SetBridgePort(o_.bridge_netns, partitioned_port_, true);
    if (killed_server_ >= 0) {
      (void)cluster_->server(killed_server_)->Signal(SIGKILL);
      (void)cluster_->server(killed_server_)->WaitForExit(absl::Seconds(10));
    }
    trainers_.clear();
    (void)cluster_->Stop(absl::Seconds(10));  // a killed daemon makes it fail: not counted
    cluster_.reset();
    tmpfs_.reset();
  }

  const FaultOptions& o_;
  const tools::LocalClusterBinaries& binaries_;
  const std::string dir_;
  TrialResult result_;
  std::unique_ptr<tools::LocalCluster> cluster_;
  std::vector<TrialTrainer> trainers_;
  std::map<int, Clock::time_point> done_;  // each call's reply time (set by its thread)
  std::future<void> resume_;
  int stopped_worker_ = -1;
  int killed_server_ = -1;
  std::string partitioned_port_;
  std::unique_ptr<PrivateTmpfs> tmpfs_;  // coordinator-disk-full: under the state file
};

absl::Status RunFaults(const FaultOptions& o) {
  absl::Duration max_stall = absl::InfiniteDuration();
  if (!o.max_stall.empty()) {
    if (!absl::ParseDuration(o.max_stall, &max_stall)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-stall: '", o.max_stall, "' is not a duration (e.g. 3s)"));
    }
  }
  absl::StatusOr<std::vector<std::string>> selected =
      SelectFaultKinds(o.kinds, !o.placement.empty() && !o.bridge_netns.empty());
  if (!selected.ok()) return selected.status();
  const std::vector<std::string>& kinds = *selected;
  absl::StatusOr<tools::LocalClusterBinaries> binaries =
      tools::LocalClusterBinaries::NextTo(SelfPath());
  if (!binaries.ok()) return binaries.status();
  std::string root = o.dir;
  if (root.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gift-faults-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
    root = tmpl;
  }
  std::vector<TrialResult> results;
  for (const std::string& kind : kinds) {
    for (int t = 0; t < o.trials; ++t) {
      const std::string dir = absl::StrCat(root, "/", kind, "-", t);
      std::filesystem::remove_all(dir);
      TrialResult r = Trial(o, *binaries, kind, t, dir).Run();
      std::cerr << absl::StrFormat("%s trial %d: lost %d double %d failed %d stall %.3f s%s\n",
                                   kind, t, r.lost, r.doubled, r.failed, r.stall_s,
                                   r.error.empty() ? "" : " (" + r.error + ")");
      // Kept with --dir, or when the trial found a fault.
      if (o.dir.empty() && r.lost == 0 && r.doubled == 0 && r.failed == 0) {
        std::filesystem::remove_all(dir);
      }
      results.push_back(std::move(r));
    }
  }
  nlohmann::json json = {{"workers", o.workers},
                         {"dataplane_auth", o.dataplane_auth},
                         {"servers", o.servers},
                         {"lease", o.lease},
                         {"trials_per_kind", o.trials},
                         {"kinds", nlohmann::json::array()},
                         {"trials", nlohmann::json::array()}};
  std::cout << "data-plane authentication "
            << (o.dataplane_auth ? "on (chunk MACs)" : "off (--no-dataplane-auth)") << "\n";
  std::cout << absl::StrFormat("%-21s %6s %5s %7s %7s %14s %14s\n", "fault", "trials", "lost",
                               "double", "failed", "max stall (s)", "median (s)");
  bool clean = true;
  int over_bound = 0;
  for (const std::string& kind : kinds) {
    int trials = 0, lost = 0, doubled = 0, failed = 0, forged_sent = 0, forged_trials = 0;
    std::vector<double> stalls;
    for (const TrialResult& r : results) {
      if (r.kind != kind) continue;
      ++trials;
      lost += r.lost;
      doubled += r.doubled;
      failed += r.failed;
      stalls.push_back(r.stall_s);
      if (absl::Seconds(r.stall_s) > max_stall) ++over_bound;
      forged_sent += r.forged_sent;
      forged_trials += r.forged_counted > 0 ? 1 : 0;
    }
    const double worst = stalls.empty() ? 0 : *std::max_element(stalls.begin(), stalls.end());
    std::cout << absl::StrFormat("%-21s %6d %5d %7d %7d %14.3f %14.3f%s\n", kind, trials, lost,
                                 doubled, failed, worst, Median(stalls),
                                 ReportOnly(kind, o.dataplane_auth) ? "  (reported, not asserted)" : "");
    if (kind == "spoof") {
      std::cout << absl::StrFormat(
          "  spoof: %d forged pushes sent; a forged push was counted in %d of %d trials "
          "(rejected in %d)\n",
          forged_sent, forged_trials, trials, trials - forged_trials);
    }
    if (!ReportOnly(kind, o.dataplane_auth)) clean = clean && lost == 0 && doubled == 0 && failed == 0;
    json["kinds"].push_back({{"kind", kind},
                             {"trials", trials},
                             {"lost", lost},
                             {"double_counted", doubled},
                             {"failed", failed},
                             {"max_stall_s", worst},
                             {"asserted", !ReportOnly(kind, o.dataplane_auth)},
                             {"forged_pushes_sent", forged_sent},
                             {"trials_counting_forged", forged_trials},
                             {"median_stall_s", Median(stalls)}});
  }
  for (const TrialResult& r : results) {
    json["trials"].push_back({{"kind", r.kind},
                              {"trial", r.trial},
                              {"lost", r.lost},
                              {"double_counted", r.doubled},
                              {"failed", r.failed},
                              {"stall_s", r.stall_s},
                              {"forged_pushes_sent", r.forged_sent},
                              {"forged_elements_counted", r.forged_counted},
                              {"error", r.error}});
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << json.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", o.json));
  }
  if (o.dir.empty() && clean) std::filesystem::remove_all(root);
  if (!clean) {
    return absl::DataLossError(absl::StrCat(
        "some trials lost, double counted or failed steps (runs kept under ", root, ")"));
  }
  if (over_bound > 0) {
    return absl::DeadlineExceededError(
        absl::StrCat(over_bound, " trials stalled longer than --max-stall ", o.max_stall));
  }
  return absl::OkStatus();
}

}  // namespace

Command AddFaultsCommand(CLI::App& parent) {
  auto o = std::make_shared<FaultOptions>();
  CLI::App* app = parent.add_subcommand(
      "faults",
      "fault-injection suite on a local cluster (kill -9 / SIGSTOP of each daemon kind) with "
      "exact-once counts and the stall per fault");
  app->add_option("--kinds", o->kinds,
                  "comma-separated fault kinds, or all: worker-kill, worker-stop, server-kill, "
                  "server-stop, coordinator-kill, coordinator-stop")
      ->capture_default_str();
  app->add_option("--trials", o->trials, "trials per kind (a fresh cluster each)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app->add_option("--workers", o->workers, "gift-worker daemons")
      ->check(CLI::Range(2, 12))
      ->capture_default_str();
  app->add_option("--servers", o->servers, "gift-server shards")
      ->check(CLI::Range(2, 16))
      ->capture_default_str();
  app->add_option("--lease", o->lease, "coordinator lease TTL (the default: 10s)")
      ->capture_default_str();
  app->add_flag("--dataplane-auth,!--no-dataplane-auth", o->dataplane_auth,
               "data-plane MACs on every chunk (the coordinator's --dataplane-auth; on by "
               "default): the spoof kind is asserted, a forged push counted is a fault; "
               "--no-dataplane-auth: off, the spoof kind is only reported")
      ->capture_default_str();
  app->add_option("--max-stall", o->max_stall,
                  "fail (exit status) when a trial's stall exceeds this duration (e.g. 3s)");
  app->add_option("--placement", o->placement,
                  "run the daemons where this placement says (scripts/netlab.sh writes one)");
  app->add_option("--bridge-netns", o->bridge_netns,
                  "the netlab bridge namespace (PREFIX-br): enables worker-partition and "
                  "server-partition, which take a host's bridge port down");
  app->add_option("--json", o->json, "write the results as JSON to this file");
  app->add_option("--dir", o->dir,
                  "run directory, kept with every trial's logs (default: a temporary one, "
                  "removed unless a trial found a fault)");
  return {app, [o] { return RunFaults(*o); }};
}

}  // namespace gift::bench
