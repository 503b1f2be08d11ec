// A whole GIFT-PS cluster on one machine, as real processes on loopback:
// gift-coordinator, S gift-server shards and P gift-worker daemons (each
// worker serving the Worker API on DIR/worker-<i>.sock). Used by the
// gift-cluster launcher, the integration tests, gift-bench cluster and the
// demo.
//
//   LocalClusterOptions options;
//   options.binaries = LocalClusterBinaries::NextTo(argv[0]);
//   options.dir = "/tmp/gift-run";
//   auto cluster = LocalCluster::Start(options);     // every daemon ready
//   ... connect clients to (*cluster)->worker_socket(i) ...
//   (*cluster)->Stop();
//
// With a placement (ClusterPlacement, e.g. written by scripts/netlab.sh),
// each daemon runs under a command prefix (e.g. `ip netns exec NS`) and
// binds its own address instead of loopback; the coordinator's address is
// what the others dial. The Worker API sockets stay filesystem paths.
//
// Every daemon logs to DIR/logs/<name>.log (and is kept in memory for
// WaitForLine). Children get SIGTERM when the thread that started them
// exits, so a killed launcher leaves no daemons behind.
//
// Ownership: owns the processes (the destructor stops them, SIGKILL if they
// do not exit). Thread safety: Start, Stop, the kills and restarts from one thread; the
// accessors may be called from any thread.
#ifndef GIFT_TOOLS_GIFT_CLUSTER_LOCAL_CLUSTER_H_
#define GIFT_TOOLS_GIFT_CLUSTER_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::tools {

struct LocalClusterBinaries {
  std::string coordinator;  // gift-coordinator
  std::string server;       // gift-server
  std::string worker;       // gift-worker

  // The daemons next to `program` (an installed bin directory), or at their
  // places in the build tree `program` belongs to (program in
  // BUILD/tools/gift-cluster/ or BUILD/bench/ ...). NotFound naming what is
  // missing.
  static absl::StatusOr<LocalClusterBinaries> NextTo(absl::string_view program);
  // The daemons of the build tree rooted at `build_dir`.
  static LocalClusterBinaries InBuildTree(absl::string_view build_dir);
};

// Where one daemon runs.
struct DaemonPlacement {
  // Prepended to the daemon's argv (prefix[0] a path, e.g. {"/usr/sbin/ip",
  // "netns", "exec", "gnl123-w0"}); it must exec the daemon in place, so that
  // the child's pid is the daemon's. Empty: the daemon is started directly.
  std::vector<std::string> prefix;
  // The host address the daemon binds ("198.18.0.11"); "": 127.0.0.1.
  std::string address;
  // A label for the host (e.g. its namespace name); daemons with the same
  // label share a host and are counted once in ReadLinkCounters().
  std::string host;
  // The network device of the host whose counters ReadLinkCounters() reads;
  // "": not counted.
  std::string device;
};

// Placements of every daemon; empty vectors and a default coordinator: all
// on loopback, as without a placement.
//
// Co-located servers (colocate_servers): no server hosts; server i runs on
// the host of worker i mod P, with that worker's placement, as BytePS
// deploys without spare machines. Each host's link then carries its
// worker's pushes and pulls to the other hosts' servers plus its server's
// share of the others' (the shard map balances bytes over servers, so every
// host carries the same), and a worker's chunks for its own host's server
// never cross the link.
struct ClusterPlacement {
  DaemonPlacement coordinator;
  std::vector<DaemonPlacement> servers;  // empty or one per server
  std::vector<DaemonPlacement> workers;  // empty or one per worker
  bool colocate_servers = false;         // servers empty; needs workers

  bool empty() const {
    return coordinator.prefix.empty() && coordinator.address.empty() && servers.empty() &&
           workers.empty();
  }
  // Where server i of `servers` runs: servers[i], worker i mod P's
  // placement when co-located, or loopback (a default placement).
  const DaemonPlacement& server(int i) const;
  // Parses
  //   {"coordinator": D, "servers": [D, ...], "workers": [D, ...],
  //    "colocate_servers": BOOL}
  // with D = {"prefix": [ARG, ...], "address": A, "host": H, "device": V}
  // (every key optional; colocate_servers excludes servers and needs
  // workers). INVALID_ARGUMENT naming what is wrong.
  static absl::StatusOr<ClusterPlacement> FromJson(absl::string_view text);
  // FromJson of a file's contents; NOT_FOUND when it cannot be read.
  static absl::StatusOr<ClusterPlacement> FromJsonFile(const std::string& path);
};

// Byte and packet counters of one host's device (/proc/PID/net/dev of a
// process on that host, so of its network namespace), and the TCP segments
// the host retransmitted (/proc/PID/net/snmp, Tcp RetransSegs).
struct LinkCounters {
  std::string host;
  std::string device;
  std::string kind;  // "coordinator", "server" or "worker": the first daemon placed there
  uint64_t rx_bytes = 0, tx_bytes = 0, rx_packets = 0, tx_packets = 0;
  uint64_t tcp_retrans_segs = 0;
};

// Reads `device`'s counters from /proc/<pid>/net/dev and the namespace's
// retransmitted TCP segments from /proc/<pid>/net/snmp ("self" for pid 0).
// NOT_FOUND when a file or the device is missing.
absl::StatusOr<LinkCounters> ReadNetDevCounters(int pid, absl::string_view device);

struct LocalClusterOptions {
  LocalClusterBinaries binaries;
  std::string dir;      // created if missing; holds state.db, sockets and logs
  int servers = 2;      // >= 1
  int workers = 4;      // >= 1
  std::string ucx_tls;  // "" : UCX's choice
  // Short, so that a killed worker is noticed quickly on one machine.
  absl::Duration lease_ttl = absl::Seconds(3);
  int server_threads = 1;
  int worker_threads = 1;
  absl::Duration step_timeout = absl::Seconds(120);
  // Extra flags per daemon kind.
  std::vector<std::string> coordinator_args;
  std::vector<std::string> server_args;
  std::vector<std::string> worker_args;
  // Each worker's --node (its node group under the policy's hierarchy
  // NODE); empty, or one per worker ("" keeps the default, the hostname).
  std::vector<std::string> worker_nodes;
  absl::Duration startup_timeout = absl::Seconds(60);
  // Serve each daemon's Prometheus page on a free port of its bind address
  // (see metrics_addresses()); off: no metrics endpoints.
  bool metrics = false;
  // Where each daemon runs (empty: all on loopback). Its vectors, when not
  // empty, must have `servers` and `workers` entries.
  ClusterPlacement placement;
};

class LocalCluster {
 public:
  // Starts the coordinator, then the servers, then the workers (each with
  // --min-workers P, so the first step waits for all of them), and waits
  // until every daemon logged that it serves. On failure everything started
  // is stopped and the error names the daemon and quotes its log.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();

  const LocalClusterOptions& options() const { return options_; }
  const std::string& coordinator_address() const { return coordinator_->address(); }
  std::string worker_name(int i) const;
  std::string server_name(int i) const;
  std::string worker_socket(int i) const;
  tools::Subprocess* worker(int i) { return workers_[i].get(); }
  tools::Subprocess* server(int i) { return servers_[i].get(); }
  tools::CoordinatorProcess* coordinator() { return coordinator_.get(); }

  // With options.metrics: (daemon name, "ADDRESS:PORT") of every daemon's
  // metrics page ("coordinator", "server-0", ..., "worker-0", ...).
  const std::vector<std::pair<std::string, std::string>>& metrics_addresses() const {
    return metrics_addresses_;
  }

  // The counters of every placed host with a device, one entry per host
  // (in the order coordinator, servers, workers), read from a live daemon
  // there; kind names every kind placed there ("server+worker" for a
  // co-located host). Empty without a placement.
  absl::StatusOr<std::vector<LinkCounters>> ReadLinkCounters() const;

  // SIGKILLs the coordinator (a crash) and starts it again on the same
  // address and state file; the servers and workers reconnect on their own.
  absl::Status RestartCoordinator();

  // SIGKILLs worker i (a crash); its socket is left behind.
  absl::Status KillWorker(int i);

  // SIGKILLs worker / server i unless it is gone already and starts it
  // again with the same flags (a supervisor's restart: a new member, which
  // joins the running cluster); waits until it serves. Its log goes on in
  // the same file.
  absl::Status RestartWorker(int i);
  absl::Status RestartServer(int i);

  // SIGTERM to the workers, then the servers, then the coordinator; waits
  // up to `grace` for each. Returns the first failure (a daemon that had to
  // be killed or exited nonzero); later calls return OK.
  absl::Status Stop(absl::Duration grace = absl::Seconds(20));

 private:
  explicit LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

  absl::Status StartAll();
  // One daemon of `placement` (its `argv`, the transport flags, `extra`),
  // logging to DIR/logs/<name>.log; the coordinator must be running.
  absl::StatusOr<std::unique_ptr<tools::Subprocess>> StartDaemon(
      const DaemonPlacement& placement, std::vector<std::string> argv,
      const std::vector<std::string>& extra, const std::string& name) const;
  absl::StatusOr<std::unique_ptr<tools::Subprocess>> StartServer(int s) const;
  absl::StatusOr<std::unique_ptr<tools::Subprocess>> StartWorker(int w) const;
  // SIGKILLs `process` unless it is gone, replaces it with (this->*start)(i)
  // and waits for it to log `event`.
  absl::Status Replace(
      std::unique_ptr<tools::Subprocess>& process,
      absl::StatusOr<std::unique_ptr<tools::Subprocess>> (LocalCluster::*start)(int) const, int i,
      const std::string& name, const std::string& event);
  // Waits (startup_timeout) for `p` to log `event`; the error quotes its log.
  absl::Status WaitForEvent(tools::Subprocess& p, const std::string& name,
                            const std::string& event) const;
  // Starts the coordinator on `listen` (its placed address, port 0, the
  // first time).
  absl::Status StartCoordinator(const std::string& listen);
  // The placement of server/worker i (a default one when none is given).
  const DaemonPlacement& server_placement(int i) const;
  const DaemonPlacement& worker_placement(int i) const;

  LocalClusterOptions options_;
  std::unique_ptr<tools::CoordinatorProcess> coordinator_;
  std::vector<std::unique_ptr<tools::Subprocess>> servers_;
  std::vector<std::unique_ptr<tools::Subprocess>> workers_;
  std::vector<bool> killed_;
  std::vector<std::pair<std::string, std::string>> metrics_addresses_;
  bool stopped_ = false;
};

}  // namespace gift::tools

#endif  // GIFT_TOOLS_GIFT_CLUSTER_LOCAL_CLUSTER_H_
