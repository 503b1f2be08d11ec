// gift-cluster: a local GIFT-PS cluster in one command, for trying the
// service, the demo, tests and benchmarks.
//
//   gift-cluster --servers 2 --workers 4 --dir /tmp/gift-run
//
// Starts gift-coordinator, S gift-server shards and P gift-worker daemons
// as real processes on loopback (local_cluster.h), prints one JSON line on
// stdout once every daemon serves:
//   {"event":"ready","dir":D,"coordinator":"127.0.0.1:PORT","servers":[...],
//    "workers":[{"name":"worker-0","socket":"D/worker-0.sock","pid":N}, ...],
//    "metrics":{"coordinator":"127.0.0.1:PORT", ...}}   (with --metrics)
// and runs until SIGTERM/SIGINT (or, with --stop-on-stdin-eof, until its
// stdin closes), then stops every daemon. Daemon logs: D/logs/<name>.log.
// With --placement FILE (JSON, as ClusterPlacement::FromJson takes it;
// scripts/netlab.sh writes one), every daemon runs under its command prefix
// (e.g. `ip netns exec NS`) bound to its own address; with --colocate (or
// "colocate_servers": true in it) server i runs on worker i mod P's host.
// Exit codes: 0 after a clean stop, 1 when the cluster fails to start or a
// daemon fails to stop cleanly, 64 for bad flags.
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/shutdown.h"
#include "nlohmann/json.hpp"
#include "tools/gift-cluster/local_cluster.h"

namespace gift::tools {
namespace {

// Whether stdin has reached end of file (or an error), without blocking.
bool StdinClosed() {
  pollfd p{.fd = STDIN_FILENO, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return read(STDIN_FILENO, &c, 1) == 0;
}

int Main(int argc, char** argv) {
  // First, before anything can start a thread (gRPC starts its executor and
  // timer threads when the first credentials are made): threads inherit the
  // mask, and one that leaves SIGTERM unblocked lets it kill the process
  // (exit 143) instead of starting the drain.
  daemon::SignalWaiter signals;
  CLI::App app(
      "gift-cluster: starts a local GIFT-PS cluster (coordinator, aggregator servers, workers) "
      "as processes on loopback and stops it on SIGTERM/SIGINT.");
  LocalClusterOptions options;
  std::string bin_dir;
  options.lease_ttl = absl::Seconds(3);
  bool stop_on_eof = false;
  std::string placement_file;
  app.add_option("--servers", options.servers, "aggregator shards")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--workers", options.workers, "worker daemons (one per simulated GPU)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--dir", options.dir,
                 "directory for the state, the worker sockets and the logs (default: a new "
                 "directory under $TMPDIR or /tmp)");
  app.add_option("--ucx-tls", options.ucx_tls, "UCX transports (default: UCX's choice)");
  app.add_option("--bin-dir", bin_dir,
                 "directory of gift-coordinator, gift-server and gift-worker, or a build tree "
                 "(default: next to this program, or its build tree)");
  daemon::AddDurationOption(app, "--lease-ttl", &options.lease_ttl,
                            "member lease TTL (how soon a dead daemon is noticed), e.g. 3s");
  daemon::AddDurationOption(app, "--step-timeout", &options.step_timeout,
                            "the workers' --step-timeout, e.g. 120s or 2m");
  app.add_option("--server-threads", options.server_threads, "reduction threads per server")
      ->capture_default_str();
  app.add_option("--worker-threads", options.worker_threads, "codec threads per worker")
      ->capture_default_str();
  app.add_flag("--metrics", options.metrics,
               "serve every daemon's Prometheus page on a free loopback port (listed in the ready "
               "line)");
  app.add_option("--placement", placement_file,
                 "JSON file: a command prefix and bind address per daemon (default: all on "
                 "loopback)");
  bool colocate = false;
  app.add_flag("--colocate", colocate,
               "run server i on worker i mod P's host (the placement's workers; its servers "
               "must be absent), as BytePS without spare machines");
  app.add_flag("--stop-on-stdin-eof", stop_on_eof,
               "also stop when stdin closes (the parent that started it went away)");
  if (std::optional<int> exit = daemon::ParseDaemonFlags(app, argc, argv, "gift-cluster")) {
    return *exit;
  }
  if (bin_dir.empty()) {
    auto found = LocalClusterBinaries::NextTo(argv[0]);
    if (!found.ok()) return daemon::UsageError("gift-cluster", found.status().message());
    options.binaries = *found;
  } else {
    auto found = LocalClusterBinaries::NextTo(bin_dir + "/gift-cluster");
    if (!found.ok()) return daemon::UsageError("gift-cluster", found.status().message());
    options.binaries = *found;
  }
  if (!placement_file.empty()) {
    auto placement = ClusterPlacement::FromJsonFile(placement_file);
    if (!placement.ok()) return daemon::UsageError("gift-cluster", placement.status().message());
    options.placement = *std::move(placement);
  }
  if (colocate) {
    if (options.placement.workers.empty() || !options.placement.servers.empty()) {
      return daemon::UsageError("gift-cluster",
                                "--colocate: needs a --placement with workers and no servers");
    }
    options.placement.colocate_servers = true;
  }
  if (options.dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/gift-cluster-XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      std::fprintf(stderr, "gift-cluster: cannot create a directory under /tmp\n");
      return 1;
    }
    options.dir = dir;
  }

  auto cluster = LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "gift-cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  nlohmann::json ready = {
      {"event", "ready"}, {"dir", options.dir}, {"coordinator", (*cluster)->coordinator_address()}};
  ready["servers"] = nlohmann::json::array();
  for (int s = 0; s < options.servers; ++s) ready["servers"].push_back((*cluster)->server_name(s));
  ready["workers"] = nlohmann::json::array();
  for (int w = 0; w < options.workers; ++w) {
    ready["workers"].push_back({{"name", (*cluster)->worker_name(w)},
                                {"socket", (*cluster)->worker_socket(w)},
                                {"pid", (*cluster)->worker(w)->pid()}});
  }
  if (options.metrics) {
    ready["metrics"] = nlohmann::json::object();
    for (const auto& [name, address] : (*cluster)->metrics_addresses()) {
      ready["metrics"][name] = address;
    }
  }
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  // The coordinator's port is chosen at start: say it the way giftctl reads
  // it ($GIFT_COORDINATOR), so that the next command finds this cluster.
  std::fprintf(stderr,
               "gift-cluster: ready; logs in %s/logs; stop with Ctrl-C\n"
               "gift-cluster: for giftctl: export GIFT_COORDINATOR=%s\n",
               options.dir.c_str(), (*cluster)->coordinator_address().c_str());

  while (true) {
    if (signals.WaitFor(absl::Milliseconds(200)).has_value()) break;
    if (stop_on_eof && StdinClosed()) break;
  }
  const absl::Status stopped = (*cluster)->Stop();
  if (!stopped.ok()) {
    std::fprintf(stderr, "gift-cluster: %s\n", stopped.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gift::tools

int main(int argc, char** argv) { return gift::tools::Main(argc, argv); }
