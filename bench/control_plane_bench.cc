#include "bench/control_plane_bench.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <stdlib.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/simulated_members.h"
#include "common/base/status_macros.h"
#include "common/base/temp_dir.h"
#include "common/control/coordinator_client.h"
#include "common/rpc/credentials.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/test_ca.h"

namespace gift::bench {
namespace {

namespace v1 = ::gift::v1;
using control::CoordinatorClient;

constexpr absl::Duration kRpcTimeout = absl::Seconds(30);
constexpr absl::Duration kFanoutTimeout = absl::Seconds(60);
constexpr int64_t kTensorRows = 256;
constexpr int64_t kTensorCols = 128;
constexpr int64_t kBasisRank = 16;

// ---- finding and measuring the coordinator -------------------------------------

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// --coordinator-bin, else the build tree's binary (known at configure time or
// next to this executable's build tree), else gift-coordinator on PATH.
absl::StatusOr<std::string> FindCoordinator(const std::string& flag) {
  if (!flag.empty()) {
    if (IsExecutable(flag)) return flag;
    return absl::NotFoundError(absl::StrCat("--coordinator-bin ", flag, " is not executable"));
  }
  std::vector<std::string> candidates;
#ifdef GIFT_BENCH_COORDINATOR_BIN
  candidates.push_back(GIFT_BENCH_COORDINATOR_BIN);
#endif
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back(
        (self.parent_path().parent_path() / "server/coordinator/gift-coordinator").string());
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      candidates.push_back(absl::StrCat(dir, "/gift-coordinator"));
    }
  }
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  return absl::NotFoundError(
      "no gift-coordinator binary next to gift-bench's build tree or on PATH; pass "
      "--coordinator-bin");
}

// utime + stime of a process, in seconds.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  std::optional<ProcessUsage> usage = ReadProcessUsage(absl::StrCat(pid));
  if (!usage) return absl::UnavailableError(absl::StrCat("cannot read /proc/", pid, "/stat"));
  return usage->cpu_s;
}

// ---- helpers ------------------------------------------------------------------

// A real serialized basis of a random kTensorRows x kTensorCols gradient.
absl::StatusOr<std::string> MakeBasis(uint64_t tensor_id, uint64_t version) {
  std::srand(static_cast<unsigned>(tensor_id * 7919 + version));
  const Eigen::MatrixXd g = Eigen::MatrixXd::Random(kTensorRows, kTensorCols);
  GIFT_ASSIGN_OR_RETURN(
      transform::SideBasis out,
      transform::SideBasis::FromFactor(g * g.transpose() / double{kTensorCols}, kBasisRank));
  GIFT_ASSIGN_OR_RETURN(
      transform::SideBasis in,
      transform::SideBasis::FromFactor(g.transpose() * g / double{kTensorRows}, kBasisRank));
  GIFT_ASSIGN_OR_RETURN(transform::TensorBasis basis,
                        transform::TensorBasis::Create({.tensor_id = tensor_id,
                                                        .version = version,
                                                        .d_out = kTensorRows,
                                                        .d_in = kTensorCols,
                                                        .config = {transform::Sides::kBoth, 0.25}},
                                                       std::move(out), std::move(in)));
  return transform::SerializeTensorBasis(basis);
}

bool HasVersion(const v1::ClusterState& state, uint64_t tensor_id, uint64_t version) {
  for (const v1::TensorBasisState& b : state.bases()) {
    if (b.tensor_id() != tensor_id) continue;
    for (const v1::BasisVersion& v : b.versions()) {
      if (v.version() == version) return true;
    }
  }
  return false;
}

nlohmann::json Summary(const std::vector<double>& seconds) {
  if (seconds.empty()) return nullptr;
  return {{"p50_ms", 1e3 * Percentile(seconds, 0.5)},
          {"p95_ms", 1e3 * Percentile(seconds, 0.95)},
          {"max_ms", 1e3 * *std::max_element(seconds.begin(), seconds.end())},
          {"samples_ms", [&] {
             std::vector<double> ms;
             for (double s : seconds) ms.push_back(1e3 * s);
             return ms;
           }()}};
}

std::string SummaryRow(const std::string& name, const std::vector<double>& s) {
  if (s.empty()) return absl::StrFormat("%-26s  -", name);
  return absl::StrFormat("%-26s  %9.1f  %9.1f  %9.1f", name, 1e3 * Percentile(s, 0.5),
                         1e3 * Percentile(s, 0.95), 1e3 * *std::max_element(s.begin(), s.end()));
}

// The certificates of a mutual-TLS run (made with openssl in the run's
// directory): the coordinator's, one worker certificate the simulated members
// share, and an operator's for the policy changes.
struct BenchCertificates {
  rpc::TlsFiles coordinator, worker, operator_;
};

absl::StatusOr<BenchCertificates> MakeBenchCertificates(const std::string& dir) {
  GIFT_ASSIGN_OR_RETURN(tools::TestCa ca, tools::TestCa::Create(dir, "ca"));
  BenchCertificates certs;
  GIFT_ASSIGN_OR_RETURN(certs.coordinator, ca.Issue("coordinator", {}));
  GIFT_ASSIGN_OR_RETURN(certs.worker, ca.Issue("worker", {"spiffe://gift/worker"}));
  GIFT_ASSIGN_OR_RETURN(certs.operator_, ca.Issue("operator", {"spiffe://gift/operator"}));
  return certs;
}

// A client on a connection of its own (a local subchannel pool per channel).
absl::StatusOr<std::unique_ptr<CoordinatorClient>> OwnConnection(const std::string& address,
                                                                 const rpc::TlsFiles& tls) {
  GIFT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                        rpc::MakeChannelCredentials(tls));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return std::make_unique<CoordinatorClient>(
      grpc::CreateCustomChannel(address, std::move(credentials), args), kRpcTimeout);
}

// One measurement against a fresh coordinator, plaintext or mutual TLS; prints
// its tables to `os` and returns its numbers.
absl::StatusOr<nlohmann::json> MeasureControlPlane(const ControlPlaneBenchOptions& options,
                                                   const std::string& binary, bool tls,
                                                   std::ostream& os) {
  GIFT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("gift-bench-control", options.state_dir));
  BenchCertificates certs;
  if (tls) {
    GIFT_ASSIGN_OR_RETURN(certs, MakeBenchCertificates(dir.path()));
  }

  tools::CoordinatorProcessOptions process_options;
  process_options.binary = binary;
  process_options.state_file = dir.File("coordinator.db");
  process_options.extra_args = {"--lease-ttl", absl::StrCat(options.lease_ttl_s)};
  if (tls) {
    process_options.extra_args.insert(process_options.extra_args.end(),
                                      {"--tls-cert", certs.coordinator.cert, "--tls-key",
                                       certs.coordinator.key, "--tls-ca", certs.coordinator.ca});
  }
  GIFT_ASSIGN_OR_RETURN(std::unique_ptr<tools::CoordinatorProcess> coordinator,
                        tools::CoordinatorProcess::Start(process_options));
  const pid_t pid = coordinator->pid();
  os << "control plane (" << (tls ? "mutual TLS" : "plaintext") << "): " << options.members
     << " members, " << options.tensors << " tensors, coordinator " << binary << " (pid " << pid
     << ", " << coordinator->address() << ", state in " << dir.path() << ")\n";

  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  for (int c = 0; c < options.channels; ++c) {
    GIFT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client,
                          OwnConnection(coordinator->address(), certs.worker));
    clients.push_back(std::move(client));
  }
  // Policy changes are the operator's (the worker certificate may not).
  GIFT_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> operator_client,
                        OwnConnection(coordinator->address(), certs.operator_));

  // Setup: join, watch, register.
  const absl::Time setup_start = absl::Now();
  std::vector<SimMember> members(options.members);
  for (int i = 0; i < options.members; ++i) {
    members[i].client = clients[i % clients.size()].get();
    v1::JoinRequest join;
    join.set_name(absl::StrCat("sim-", i / 8, "/gpu", i % 8));
    join.set_role(v1::MEMBER_ROLE_WORKER);
    GIFT_ASSIGN_OR_RETURN(v1::JoinResponse joined, members[i].client->Join(join));
    members[i].id = joined.member_id();
  }
  const double join_s = absl::ToDoubleSeconds(absl::Now() - setup_start);
  std::map<std::string, int> index_of;
  for (int i = 0; i < options.members; ++i) index_of[members[i].id] = i;

  FanoutTracker tracker(options.members);
  GIFT_ASSIGN_OR_RETURN(v1::StatusResponse joined_status, clients[0]->GetStatus());
  const uint64_t joined_revision = joined_status.state().revision();
  tracker.Arm(
      [joined_revision](const v1::ClusterState& s) { return s.revision() >= joined_revision; });
  const absl::Time watch_start = absl::Now();
  for (int i = 0; i < options.members; ++i) {
    members[i].watch =
        std::make_unique<WatchStream>(&members[i].client->stub(), members[i].id, i, &tracker);
  }
  GIFT_ASSIGN_OR_RETURN(const absl::Time watching, tracker.WaitAll(kFanoutTimeout));
  const double watch_s = absl::ToDoubleSeconds(watching - watch_start);

  v1::RegisterTensorsRequest registration;
  registration.set_member_id(members[0].id);
  for (int t = 0; t < options.tensors; ++t) {
    v1::TensorSpec* spec = registration.add_tensors();
    spec->set_name(absl::StrCat("layers.", t, ".mlp.weight"));
    spec->add_shape(kTensorRows);
    spec->add_shape(kTensorCols);
    spec->set_dtype(v1::DTYPE_FLOAT32);
  }
  GIFT_ASSIGN_OR_RETURN(v1::RegisterTensorsResponse registered,
                        clients[0]->RegisterTensors(registration));
  std::vector<uint64_t> tensor_ids;
  for (const v1::TensorInfo& t : registered.tensors()) tensor_ids.push_back(t.tensor_id());

  // The bases, built before anything is timed.
  struct Refresh {
    uint64_t tensor_id = 0;
    uint64_t version = 0;
    std::string bytes;
  };
  std::vector<Refresh> refreshes(options.refreshes);
  for (int r = 0; r < options.refreshes; ++r) {
    refreshes[r].tensor_id = tensor_ids[r % tensor_ids.size()];
    refreshes[r].version = 1 + r / tensor_ids.size();
    GIFT_ASSIGN_OR_RETURN(refreshes[r].bytes,
                          MakeBasis(refreshes[r].tensor_id, refreshes[r].version));
  }
  os << absl::StrFormat("setup: %d joins in %.2f s, all watches streaming after %.2f s\n",
                        options.members, join_s, watch_s);

  auto stepper = std::make_unique<Stepper>(&members, &tracker, absl::Milliseconds(options.step_ms),
                                           kRpcTimeout);

  // Steady state: heartbeats and watches only.
  constexpr absl::Duration kSteady = absl::Seconds(3);
  GIFT_ASSIGN_OR_RETURN(const double steady_cpu0, ProcessCpuSeconds(pid));
  const absl::Time steady_start = absl::Now();
  absl::SleepFor(kSteady);
  GIFT_ASSIGN_OR_RETURN(const double steady_cpu1, ProcessCpuSeconds(pid));
  const double steady_wall = absl::ToDoubleSeconds(absl::Now() - steady_start);
  const double steady_cpu = steady_cpu1 - steady_cpu0;

  // Refreshes.
  GIFT_ASSIGN_OR_RETURN(const double cpu0, ProcessCpuSeconds(pid));
  const absl::Time measure_start = absl::Now();
  std::vector<double> commit_s, watched_s;
  nlohmann::json refresh_json = nlohmann::json::array();
  os << "\nrefresh  tensor  version  bytes    publish->commit ms  publish->all watched ms\n";
  for (const Refresh& r : refreshes) {
    const std::shared_ptr<const v1::ClusterState> state = tracker.latest();
    std::string owner_id;
    for (const v1::TensorBasisState& b : state->bases()) {
      if (b.tensor_id() == r.tensor_id) owner_id = b.owner_member_id();
    }
    const auto owner = index_of.find(owner_id);
    if (owner == index_of.end()) {
      return absl::InternalError(absl::StrCat("tensor ", r.tensor_id, " has no owner among the ",
                                              "simulated members ('", owner_id, "')"));
    }
    tracker.Arm([&r](const v1::ClusterState& s) { return HasVersion(s, r.tensor_id, r.version); });
    const absl::Time t0 = absl::Now();
    v1::BasisHeader header;
    header.set_member_id(owner_id);
    header.set_tensor_id(r.tensor_id);
    header.set_version(r.version);
    header.set_rank(kBasisRank);
    GIFT_RETURN_IF_ERROR(members[owner->second].client->PublishBasis(header, r.bytes).status());

    absl::Mutex mu;
    absl::Status failure;
    absl::Time committed_at = absl::InfiniteFuture();
    std::vector<std::thread> threads;
    for (int t = 0; t < options.fetch_threads; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = t; i < members.size(); i += options.fetch_threads) {
          const SimMember& m = members[i];
          absl::StatusOr<control::FetchedBasis> fetched =
              m.client->FetchBasis(m.id, r.tensor_id, r.version);
          absl::StatusOr<v1::AckBasisResponse> acked =
              fetched.ok() ? m.client->AckBasis(m.id, r.tensor_id, r.version)
                           : absl::StatusOr<v1::AckBasisResponse>(fetched.status());
          const absl::Time now = absl::Now();
          absl::MutexLock lock(&mu);
          if (!acked.ok()) {
            if (failure.ok()) failure = acked.status();
            return;
          }
          if (acked->committed()) committed_at = std::min(committed_at, now);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    GIFT_RETURN_IF_ERROR(failure);
    GIFT_ASSIGN_OR_RETURN(const absl::Time all_seen, tracker.WaitAll(kFanoutTimeout));
    if (committed_at == absl::InfiniteFuture()) {
      return absl::InternalError(absl::StrCat("tensor ", r.tensor_id, " version ", r.version,
                                              ": no ack reported the commit"));
    }
    commit_s.push_back(absl::ToDoubleSeconds(committed_at - t0));
    watched_s.push_back(absl::ToDoubleSeconds(all_seen - t0));
    os << absl::StrFormat("%7zu  %6d  %7d  %7zu  %18.1f  %23.1f\n", refresh_json.size() + 1,
                          r.tensor_id, r.version, r.bytes.size(), 1e3 * commit_s.back(),
                          1e3 * watched_s.back());
    refresh_json.push_back({{"tensor_id", r.tensor_id},
                            {"version", r.version},
                            {"bytes", r.bytes.size()},
                            {"publish_to_commit_ms", 1e3 * commit_s.back()},
                            {"publish_to_all_watched_ms", 1e3 * watched_s.back()}});
  }

  // Policy fan-out.
  std::vector<double> policy_s;
  for (int i = 0; i < options.policy_changes; ++i) {
    GIFT_ASSIGN_OR_RETURN(v1::Policy policy, operator_client->GetPolicy());
    const uint64_t version = policy.version();
    policy.mutable_refresh()->set_period_steps(100 + i);
    tracker.Arm([version](const v1::ClusterState& s) { return s.policy().version() > version; });
    const absl::Time t0 = absl::Now();
    GIFT_RETURN_IF_ERROR(operator_client->SetPolicy(policy, version).status());
    GIFT_ASSIGN_OR_RETURN(const absl::Time all_seen, tracker.WaitAll(kFanoutTimeout));
    policy_s.push_back(absl::ToDoubleSeconds(all_seen - t0));
  }
  GIFT_ASSIGN_OR_RETURN(const double cpu1, ProcessCpuSeconds(pid));
  const double measured_wall = absl::ToDoubleSeconds(absl::Now() - measure_start);
  const double measured_cpu = cpu1 - cpu0;
  const uint64_t heartbeat_failures = stepper->failures();

  stepper.reset();
  for (SimMember& m : members) m.watch->Stop();
  GIFT_RETURN_IF_ERROR(coordinator->Stop());

  const double n = options.members;
  os << "\n"
     << absl::StrFormat("%-26s  %9s  %9s  %9s", "latency (ms)", "p50", "p95", "max") << "\n"
     << SummaryRow("refresh publish->commit", commit_s) << "\n"
     << SummaryRow("refresh publish->watched", watched_s) << "\n"
     << SummaryRow("policy change fan-out", policy_s) << "\n\n"
     << absl::StrFormat(
            "coordinator CPU, steady (heartbeats every %.0f ms + %d idle watches, %.1f s): "
            "%.1f ms/s = %.1f us per member per second\n",
            options.step_ms, options.members, steady_wall, 1e3 * steady_cpu / steady_wall,
            1e6 * steady_cpu / steady_wall / n)
     << absl::StrFormat(
            "coordinator CPU, refreshes + policy changes (%.1f s): %.1f ms/s = %.1f us per member "
            "per second\n",
            measured_wall, 1e3 * measured_cpu / measured_wall,
            1e6 * measured_cpu / measured_wall / n);
  if (heartbeat_failures > 0) os << "heartbeat failures: " << heartbeat_failures << "\n";

  return nlohmann::json{
      {"tls", tls},
      {"members", options.members},
      {"tensors", options.tensors},
      {"channels", options.channels},
      {"step_ms", options.step_ms},
      {"lease_ttl_s", options.lease_ttl_s},
      {"hardware_threads", HardwareThreads()},
      {"setup", {{"join_s", join_s}, {"watch_s", watch_s}}},
      {"refreshes", refresh_json},
      {"refresh_publish_to_commit", Summary(commit_s)},
      {"refresh_publish_to_all_watched", Summary(watched_s)},
      {"policy_fanout", Summary(policy_s)},
      {"coordinator_cpu",
       {{"steady_wall_s", steady_wall},
        {"steady_cpu_s", steady_cpu},
        {"steady_us_per_member_per_s", 1e6 * steady_cpu / steady_wall / n},
        {"measured_wall_s", measured_wall},
        {"measured_cpu_s", measured_cpu},
        {"measured_us_per_member_per_s", 1e6 * measured_cpu / measured_wall / n}}},
      {"heartbeat_failures", heartbeat_failures}};
}

}  // namespace

absl::Status RunControlPlaneBench(const ControlPlaneBenchOptions& options) {
  if (options.step_ms * 4 > options.lease_ttl_s * 1e3) {
    return absl::InvalidArgumentError("--step-ms must be at most a quarter of --lease-ttl");
  }
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  GIFT_ASSIGN_OR_RETURN(const std::string binary, FindCoordinator(options.coordinator_bin));
  GIFT_ASSIGN_OR_RETURN(nlohmann::json plaintext,
                        MeasureControlPlane(options, binary, /*tls=*/false, os));
  plaintext["benchmark"] = "control-plane";
  if (!options.tls) return sinks.WriteJson(plaintext);

  // The same run again with mutual TLS, against the plaintext baseline above.
  os << "\n";
  GIFT_ASSIGN_OR_RETURN(nlohmann::json secure, MeasureControlPlane(options, binary, true, os));
  const std::vector<std::pair<std::string, nlohmann::json::json_pointer>> figures = {
      {"joins (s)", nlohmann::json::json_pointer("/setup/join_s")},
      {"watches streaming (s)", nlohmann::json::json_pointer("/setup/watch_s")},
      {"refresh publish->commit p50 (ms)",
       nlohmann::json::json_pointer("/refresh_publish_to_commit/p50_ms")},
      {"refresh publish->watched p50 (ms)",
       nlohmann::json::json_pointer("/refresh_publish_to_all_watched/p50_ms")},
      {"policy fan-out p50 (ms)", nlohmann::json::json_pointer("/policy_fanout/p50_ms")},
      {"coordinator CPU steady (us/member/s)",
       nlohmann::json::json_pointer("/coordinator_cpu/steady_us_per_member_per_s")},
      {"coordinator CPU measured (us/member/s)",
       nlohmann::json::json_pointer("/coordinator_cpu/measured_us_per_member_per_s")}};
  os << "\n"
     << absl::StrFormat("%-40s  %10s  %10s  %9s", "TLS vs plaintext", "plaintext", "TLS",
                        "TLS/plain")
     << "\n";
  nlohmann::json ratios = nlohmann::json::object();
  for (const auto& [name, pointer] : figures) {
    if (!plaintext.contains(pointer) || !secure.contains(pointer)) continue;
    const double base = plaintext.at(pointer).get<double>();
    const double with_tls = secure.at(pointer).get<double>();
    const double ratio = base > 0 ? with_tls / base : 0;
    os << absl::StrFormat("%-40s  %10.2f  %10.2f  %8.2fx", name, base, with_tls, ratio) << "\n";
    ratios[pointer.to_string()] = ratio;
  }
  return sinks.WriteJson({{"benchmark", "control-plane"},
                          {"plaintext", plaintext},
                          {"tls", secure},
                          {"tls_over_plaintext", ratios}});
}

Command AddControlPlaneCommand(CLI::App& parent) {
  auto options = std::make_shared<ControlPlaneBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "control-plane",
      "refresh negotiation and watch fan-out of a real gift-coordinator with simulated members");
  app->add_option("--coordinator-bin", options->coordinator_bin,
                  "gift-coordinator binary (default: the build tree's, else PATH)");
  app->add_option("--state-dir", options->state_dir,
                  "directory for the coordinator's temporary state file (default: $TMPDIR or "
                  "/tmp); its fsync latency bounds the refresh rate");
  app->add_option("--members", options->members, "simulated worker members")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--tensors", options->tensors, "registered tensors (256 x 128 each)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app->add_option("--refreshes", options->refreshes, "basis refreshes to time")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--policy-changes", options->policy_changes, "policy changes to time")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--channels", options->channels, "connections the members share")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--step-ms", options->step_ms,
                  "simulated step time: one heartbeat per member per step")
      ->check(PositiveNumber())
      ->capture_default_str();
  app->add_option("--lease-ttl", options->lease_ttl_s, "the coordinator's lease TTL, seconds")
      ->check(PositiveNumber())
      ->capture_default_str();
  app->add_option("--fetch-threads", options->fetch_threads,
                  "threads fetching and acknowledging bases for the members")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app->add_option("--json", options->json_path,
                  "write the numbers as JSON to this file ('-': stdout, table on stderr)");
  app->add_flag("--tls", options->tls,
                "after the plaintext run, run again with mutual TLS (certificates made with "
                "openssl) and print the TLS/plaintext ratios");
  return Command{app, [options] { return RunControlPlaneBench(*options); }};
}

}  // namespace gift::bench
