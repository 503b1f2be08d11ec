#include "tools/gift-cluster/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace gift::tools {
namespace {

namespace fs = std::filesystem;

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// The last lines of a daemon's output, for an error message.
std::string Tail(const std::string& text, size_t max_chars = 2000) {
  return text.size() <= max_chars ? text : text.substr(text.size() - max_chars);
}

// The address a daemon binds (and, for the coordinator, the others dial).
std::string HostOf(const DaemonPlacement& p) { return p.address.empty() ? "127.0.0.1" : p.address; }

// Placed on testbed addresses (not loopback), the daemons serve plaintext
// gRPC only when told --insecure (common/rpc/credentials.h); a local cluster
// has no certificates.
std::vector<std::string> PlaintextFlags(const ClusterPlacement& placement) {
  if (placement.empty()) return {};
  return {"--insecure"};
}

// --metrics-listen of a daemon there: a free port of its address, or "" (none).
std::string MetricsListen(bool metrics, const DaemonPlacement& p) {
  return metrics ? absl::StrCat(HostOf(p), ":0") : std::string();
}

// argv under the placement's prefix.
std::vector<std::string> Placed(const DaemonPlacement& p, std::vector<std::string> argv) {
  argv.insert(argv.begin(), p.prefix.begin(), p.prefix.end());
  return argv;
}

absl::StatusOr<DaemonPlacement> ParseDaemonPlacement(const nlohmann::json& j,
                                                     const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not an object"));
  DaemonPlacement p;
  for (const auto& [key, value] : j.items()) {
    if (key == "prefix") {
      if (!value.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".prefix: not an array"));
      }
      for (const nlohmann::json& arg : value) {
        if (!arg.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ".prefix: not all strings"));
        }
        p.prefix.push_back(arg.get<std::string>());
      }
    } else if (key == "address" || key == "host" || key == "device") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": not a string"));
      }
      (key == "address" ? p.address : key == "host" ? p.host : p.device) = value.get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key '", key, "'"));
    }
  }
  if (!p.prefix.empty() && (p.prefix[0].empty() || p.prefix[0][0] != '/')) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".prefix[0]: not an absolute path"));
  }
  return p;
}

}  // namespace

absl::StatusOr<ClusterPlacement> ClusterPlacement::FromJson(absl::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("placement: not a JSON object");
  }
  ClusterPlacement placement;
  for (const auto& [key, value] : j.items()) {
    if (key == "coordinator") {
      auto p = ParseDaemonPlacement(value, "placement.coordinator");
      if (!p.ok()) return p.status();
      placement.coordinator = *std::move(p);
    } else if (key == "servers" || key == "workers") {
      if (!value.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat("placement.", key, ": not an array"));
      }
      for (size_t i = 0; i < value.size(); ++i) {
        auto p = ParseDaemonPlacement(value[i], absl::StrCat("placement.", key, "[", i, "]"));
        if (!p.ok()) return p.status();
        (key == "servers" ? placement.servers : placement.workers).push_back(*std::move(p));
      }
    } else if (key == "colocate_servers") {
      if (!value.is_boolean()) {
        return absl::InvalidArgumentError("placement.colocate_servers: not a boolean");
      }
      placement.colocate_servers = value.get<bool>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("placement: unknown key '", key, "'"));
    }
  }
  if (placement.colocate_servers && (!placement.servers.empty() || placement.workers.empty())) {
    return absl::InvalidArgumentError(
        "placement.colocate_servers: servers run on the workers' hosts, so the placement needs "
        "workers and no servers");
  }
  return placement;
}

const DaemonPlacement& ClusterPlacement::server(int i) const {
  static const DaemonPlacement kLoopback;
  if (colocate_servers && !workers.empty()) return workers[i % workers.size()];
  return servers.empty() ? kLoopback : servers[i];
}

absl::StatusOr<ClusterPlacement> ClusterPlacement::FromJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the placement file ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto placement = FromJson(text.str());
  if (!placement.ok()) {
    return absl::Status(placement.status().code(),
                        absl::StrCat(path, ": ", placement.status().message()));
  }
  return placement;
}

absl::StatusOr<LinkCounters> ReadNetDevCounters(int pid, absl::string_view device) {
  const std::string proc =
      absl::StrCat("/proc/", pid == 0 ? std::string("self") : absl::StrCat(pid));
  std::ifstream dev(proc + "/net/dev");
  if (!dev) return absl::NotFoundError(absl::StrCat("cannot read ", proc, "/net/dev"));
  // "  NAME: rx_bytes rx_packets errs drop fifo frame compressed multicast
  //          tx_bytes tx_packets ..."
  std::optional<LinkCounters> found;
  std::string line;
  while (!found && std::getline(dev, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    absl::string_view name = absl::StripAsciiWhitespace(absl::string_view(line).substr(0, colon));
    if (name != device) continue;
    std::istringstream fields(line.substr(colon + 1));
    uint64_t v[10] = {};
    for (uint64_t& x : v) fields >> x;
    if (!fields) return absl::InternalError(absl::StrCat(proc, "/net/dev: cannot parse ", line));
    found.emplace();
    found->device = std::string(device);
    found->rx_bytes = v[0];
    found->rx_packets = v[1];
    found->tx_bytes = v[8];
    found->tx_packets = v[9];
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("no device ", device, " in ", proc, "/net/dev"));
  }
  // "Tcp: RtoAlgorithm ... RetransSegs ..." then "Tcp: 1 200 ...".
  std::ifstream snmp(proc + "/net/snmp");
  if (!snmp) return absl::NotFoundError(absl::StrCat("cannot read ", proc, "/net/snmp"));
  std::vector<std::string> names;
  while (std::getline(snmp, line)) {
    if (!absl::StartsWith(line, "Tcp:")) continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (names.empty()) {
      names = std::move(words);
      continue;
    }
    for (size_t i = 1; i < names.size() && i < words.size(); ++i) {
      if (names[i] == "RetransSegs" && !absl::SimpleAtoi(words[i], &found->tcp_retrans_segs)) {
        return absl::InternalError(absl::StrCat(proc, "/net/snmp: cannot parse ", line));
      }
    }
    break;
  }
  return *std::move(found);
}

LocalClusterBinaries LocalClusterBinaries::InBuildTree(absl::string_view build_dir) {
  const std::string b(build_dir);
  return {.coordinator = b + "/server/coordinator/gift-coordinator",
          .server = b + "/server/aggregator/gift-server",
          .worker = b + "/worker/gift-worker"};
}

absl::StatusOr<LocalClusterBinaries> LocalClusterBinaries::NextTo(absl::string_view program) {
  std::error_code ec;
  fs::path self = fs::canonical(fs::path(std::string(program)), ec);
  if (ec) self = fs::absolute(fs::path(std::string(program)));
  const fs::path dir = self.parent_path();
  LocalClusterBinaries installed{.coordinator = (dir / "gift-coordinator").string(),
                                 .server = (dir / "gift-server").string(),
                                 .worker = (dir / "gift-worker").string()};
  if (Executable(installed.coordinator) && Executable(installed.server) &&
      Executable(installed.worker)) {
    return installed;
  }
  // BUILD/tools/gift-cluster/gift-cluster, BUILD/bench/gift-bench, BUILD/tests/x/y ...
  for (fs::path root = dir; !root.empty() && root != root.root_path(); root = root.parent_path()) {
    LocalClusterBinaries built = InBuildTree(root.string());
    if (Executable(built.coordinator) && Executable(built.server) && Executable(built.worker)) {
      return built;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "gift-coordinator, gift-server and gift-worker are neither next to ", self.string(),
      " nor in a build tree above it; build them (make) or pass their directory"));
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (options.servers < 1 || options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("need at least one server and one worker, got ",
                                                   options.servers, " and ", options.workers));
  }
  if (options.dir.empty()) return absl::InvalidArgumentError("no directory");
  for (const std::string* bin :
       {&options.binaries.coordinator, &options.binaries.server, &options.binaries.worker}) {
    if (!Executable(*bin)) {
      return absl::NotFoundError(absl::StrCat(*bin, " is not an executable"));
    }
  }
  const ClusterPlacement& placement = options.placement;
  if ((!placement.servers.empty() &&
       placement.servers.size() != static_cast<size_t>(options.servers)) ||
      (!placement.workers.empty() &&
       placement.workers.size() != static_cast<size_t>(options.workers))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the placement has ", placement.servers.size(), " servers and ", placement.workers.size(),
        " workers; the cluster ", options.servers, " and ", options.workers));
  }
  if (placement.colocate_servers && (placement.workers.empty() || !placement.servers.empty())) {
    return absl::InvalidArgumentError(
        "co-located servers need a placement with workers and no servers");
  }
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "logs", ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", options.dir, "/logs: ", ec.message()));
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  if (absl::Status s = cluster->StartAll(); !s.ok()) {
    (void)cluster->Stop(absl::Seconds(5));
    return s;
  }
  return cluster;
}

std::string LocalCluster::worker_name(int i) const { return absl::StrCat("worker-", i); }
std::string LocalCluster::server_name(int i) const { return absl::StrCat("server-", i); }
std::string LocalCluster::worker_socket(int i) const {
  return absl::StrCat(options_.dir, "/", worker_name(i), ".sock");
}

const DaemonPlacement& LocalCluster::server_placement(int i) const {
  return options_.placement.server(i);
}

const DaemonPlacement& LocalCluster::worker_placement(int i) const {
  static const DaemonPlacement kLoopback;
  return options_.placement.workers.empty() ? kLoopback : options_.placement.workers[i];
}

absl::StatusOr<std::vector<LinkCounters>> LocalCluster::ReadLinkCounters() const {
  std::vector<LinkCounters> out;
  std::vector<std::string> seen;
  auto add = [&](const DaemonPlacement& p, int pid, const char* kind) -> absl::Status {
    if (p.device.empty()) return absl::OkStatus();
    const std::string host = p.host.empty() ? HostOf(p) : p.host;
    if (auto it = std::find(seen.begin(), seen.end(), host); it != seen.end()) {
      std::string& kinds = out[it - seen.begin()].kind;  // e.g. "server+worker"
      if (!absl::StrContains(kinds, kind)) absl::StrAppend(&kinds, "+", kind);
      return absl::OkStatus();
    }
    seen.push_back(host);
    auto c = ReadNetDevCounters(pid, p.device);
    if (!c.ok()) return c.status();
    c->host = host;
    c->kind = kind;
    out.push_back(*std::move(c));
    return absl::OkStatus();
  };
  if (coordinator_ != nullptr) {
    const absl::Status s = add(options_.placement.coordinator, coordinator_->pid(), "coordinator");
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (auto s = add(server_placement(i), servers_[i]->pid(), "server"); !s.ok()) return s;
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (killed_[i]) continue;
    if (auto s = add(worker_placement(i), workers_[i]->pid(), "worker"); !s.ok()) return s;
  }
  return out;
}

absl::Status LocalCluster::WaitForEvent(tools::Subprocess& p, const std::string& name,
                                        const std::string& event) const {
  auto line = p.WaitForLine(
      [&](const std::string& l) {
        return absl::StrContains(l, absl::StrCat("\"event\":\"", event, "\""));
      },
      options_.startup_timeout);
  if (line.ok()) return absl::OkStatus();
  return absl::Status(line.status().code(),
                      absl::StrCat(name, " did not log '", event, "': ", line.status().message(),
                                   "\n", Tail(p.stderr_text())));
}

absl::StatusOr<std::unique_ptr<tools::Subprocess>> LocalCluster::StartDaemon(
    const DaemonPlacement& placement, std::vector<std::string> argv,
    const std::vector<std::string>& extra, const std::string& name) const {
  if (!options_.ucx_tls.empty()) argv.insert(argv.end(), {"--ucx-tls", options_.ucx_tls});
  for (std::string& flag : PlaintextFlags(options_.placement)) argv.push_back(std::move(flag));
  argv.insert(argv.end(), extra.begin(), extra.end());
  return tools::Subprocess::Start(
      Placed(placement, std::move(argv)),
      {.log_path = options_.dir + "/logs/" + name + ".log", .parent_death_signal = SIGTERM});
}

absl::StatusOr<std::unique_ptr<tools::Subprocess>> LocalCluster::StartServer(int s) const {
  const DaemonPlacement& placement = server_placement(s);
  std::vector<std::string> argv = {options_.binaries.server,
                                   "--coordinator",
                                   coordinator_->address(),
                                   "--name",
                                   server_name(s),
                                   "--threads",
                                   absl::StrCat(options_.server_threads),
                                   "--listen",
                                   absl::StrCat(HostOf(placement), ":0"),
                                   "--metrics-listen",
                                   MetricsListen(options_.metrics, placement)};
  return StartDaemon(placement, std::move(argv), options_.server_args, server_name(s));
}

absl::StatusOr<std::unique_ptr<tools::Subprocess>> LocalCluster::StartWorker(int w) const {
  const DaemonPlacement& placement = worker_placement(w);
  std::vector<std::string> argv = {
      options_.binaries.worker,
      "--coordinator",
      coordinator_->address(),
      "--name",
      worker_name(w),
      "--socket",
      worker_socket(w),
      "--threads",
      absl::StrCat(options_.worker_threads),
      "--min-workers",
      absl::StrCat(options_.workers),
      "--step-timeout",
      absl::StrCat(absl::ToInt64Milliseconds(options_.step_timeout), "ms"),
      "--metrics-listen",
      MetricsListen(options_.metrics, placement)};
  if (static_cast<size_t>(w) < options_.worker_nodes.size() && !options_.worker_nodes[w].empty()) {
    argv.insert(argv.end(), {"--node", options_.worker_nodes[w]});
  }
  return StartDaemon(placement, std::move(argv), options_.worker_args, worker_name(w));
}

absl::Status LocalCluster::StartAll() {
  const absl::Status started =
      StartCoordinator(absl::StrCat(HostOf(options_.placement.coordinator), ":0"));
  if (!started.ok()) return started;
  for (int s = 0; s < options_.servers; ++s) {
    auto p = StartServer(s);
    if (!p.ok()) return p.status();
    servers_.push_back(*std::move(p));
  }
  for (int s = 0; s < options_.servers; ++s) {
    if (auto st = WaitForEvent(*servers_[s], server_name(s), "joined"); !st.ok()) return st;
  }
  for (int w = 0; w < options_.workers; ++w) {
    auto p = StartWorker(w);
    if (!p.ok()) return p.status();
    workers_.push_back(*std::move(p));
    killed_.push_back(false);
  }
  for (int w = 0; w < options_.workers; ++w) {
    if (auto st = WaitForEvent(*workers_[w], worker_name(w), "ready"); !st.ok()) return st;
  }
  if (options_.metrics) {
    auto record = [&](const std::string& name, const std::string& log) -> absl::Status {
      for (absl::string_view line : absl::StrSplit(log, '\n')) {
        auto event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (event.is_object() && event.value("event", "") == "metrics_listening") {
          metrics_addresses_.emplace_back(name, event.value("address", ""));
          return absl::OkStatus();
        }
      }
      return absl::InternalError(absl::StrCat(name, " logged no metrics address"));
    };
    // Every daemon logs metrics_listening before it reports ready.
    if (auto st = record("coordinator", coordinator_->log()); !st.ok()) return st;
    for (int s = 0; s < options_.servers; ++s) {
      if (auto st = record(server_name(s), servers_[s]->stderr_text()); !st.ok()) return st;
    }
    for (int w = 0; w < options_.workers; ++w) {
      if (auto st = record(worker_name(w), workers_[w]->stderr_text()); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartCoordinator(const std::string& listen) {
  const std::string logs = options_.dir + "/logs/";
  const DaemonPlacement& placement = options_.placement.coordinator;
  tools::CoordinatorProcessOptions c{
      .binary = options_.binaries.coordinator,
      .state_file = options_.dir + "/state.db",
      .listen = listen,
      .extra_args = {"--lease-ttl",
                     absl::StrCat(absl::ToInt64Milliseconds(options_.lease_ttl), "ms"),
                     "--metrics-listen", MetricsListen(options_.metrics, placement)},
      .prefix = placement.prefix,
      .startup_timeout = options_.startup_timeout,
      .subprocess = {.log_path = logs + "coordinator.log", .parent_death_signal = SIGTERM}};
  for (std::string& flag : PlaintextFlags(options_.placement)) c.extra_args.push_back(flag);
  c.extra_args.insert(c.extra_args.end(), options_.coordinator_args.begin(),
                      options_.coordinator_args.end());
  auto coordinator = tools::CoordinatorProcess::Start(c);
  if (!coordinator.ok()) return coordinator.status();
  coordinator_ = *std::move(coordinator);
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  if (coordinator_ == nullptr) return absl::FailedPreconditionError("no coordinator");
  const std::string address = coordinator_->address();
  if (absl::Status s = coordinator_->Kill(); !s.ok()) return s;
  coordinator_.reset();
  return StartCoordinator(address);
}

absl::Status LocalCluster::KillWorker(int i) {
  if (i < 0 || i >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  }
  if (auto s = workers_[i]->Signal(SIGKILL); !s.ok()) return s;
  auto code = workers_[i]->WaitForExit(absl::Seconds(10));
  if (!code.ok()) return code.status();
  killed_[i] = true;
  return absl::OkStatus();
}

absl::Status LocalCluster::Replace(
    std::unique_ptr<tools::Subprocess>& process,
    absl::StatusOr<std::unique_ptr<tools::Subprocess>> (LocalCluster::*start)(int) const, int i,
    const std::string& name, const std::string& event) {
  (void)process->Signal(SIGKILL);
  (void)process->WaitForExit(absl::Seconds(10));
  auto p = (this->*start)(i);
  if (!p.ok()) return p.status();
  process = *std::move(p);
  return WaitForEvent(*process, name, event);
}

absl::Status LocalCluster::RestartWorker(int i) {
  if (i < 0 || i >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  }
  absl::Status restarted =
      Replace(workers_[i], &LocalCluster::StartWorker, i, worker_name(i), "ready");
  if (restarted.ok()) killed_[i] = false;
  return restarted;
}

absl::Status LocalCluster::RestartServer(int i) {
  if (i < 0 || i >= static_cast<int>(servers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no server ", i));
  }
  return Replace(servers_[i], &LocalCluster::StartServer, i, server_name(i), "joined");
}

absl::Status LocalCluster::Stop(absl::Duration grace) {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  absl::Status first;
  auto stop_all = [&](std::vector<std::unique_ptr<tools::Subprocess>>& ps,
                      const std::vector<bool>* killed, absl::string_view kind) {
    for (size_t i = 0; i < ps.size(); ++i) {
      if (killed != nullptr && (*killed)[i]) continue;
      (void)ps[i]->Signal(SIGTERM);
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      if (killed != nullptr && (*killed)[i]) continue;
      auto code = ps[i]->WaitForExit(grace);
      absl::Status s;
      if (!code.ok()) {
        (void)ps[i]->Signal(SIGKILL);
        s = absl::DeadlineExceededError(
            absl::StrCat(kind, " ", i, " did not exit within ", absl::FormatDuration(grace)));
      } else if (*code != 0) {
        s = absl::InternalError(
            absl::StrCat(kind, " ", i, " exited with ", *code, "\n", Tail(ps[i]->stderr_text())));
      }
      if (first.ok() && !s.ok()) first = s;
    }
  };
  stop_all(workers_, &killed_, "worker");
  stop_all(servers_, nullptr, "server");
  if (coordinator_ != nullptr) {
    if (absl::Status s = coordinator_->Stop(grace); first.ok() && !s.ok()) first = s;
  }
  return first;
}

LocalCluster::~LocalCluster() { (void)Stop(absl::Seconds(5)); }

}  // namespace gift::tools
