// What `gift-bench faults` and `gift-bench soak` do to the machine to
// inject a fault that is not a signal: a full disk under the coordinator and
// a partitioned netlab host.
//
// Thread safety: the functions may be called from any thread; a
// PrivateTmpfs is used from one thread at a time. Ownership: a PrivateTmpfs
// owns the process that holds its mount namespace and kills it when
// destroyed (the tmpfs and everything on it go with it).
#ifndef GIFT_BENCH_FAULT_TOOLS_H_
#define GIFT_BENCH_FAULT_TOOLS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/gift-cluster/local_cluster.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::bench {

// Every fault kind the fault suite and the soak know, in report order:
// worker-/server-/coordinator- kill and stop, coordinator-disk-full, spoof,
// worker-/server-partition.
const std::vector<std::string>& FaultKinds();

// worker-partition and server-partition: they need a netlab testbed.
bool IsPartition(absl::string_view kind);

// Writes `path` until its file system is full (ENOSPC). INTERNAL when the
// file cannot be created, or 1 GiB went in without filling it.
absl::Status FillDisk(const std::string& path);

// `ip -n BRIDGE_NETNS link set PORT up|down`: a netlab host's bridge port
// ("w<i>", "s<i>"; scripts/netlab.sh) taken down drops its packets both ways
// and leaves its connections open.
absl::Status SetBridgePort(const std::string& bridge_netns, const std::string& port, bool up);

// The kinds of a --kinds flag: a comma-separated list, or "all" for every
// kind this run can inject (the others named on stderr). Partitions need
// `netlab` (--placement and --bridge-netns under scripts/netlab.sh exec),
// coordinator-disk-full needs root. INVALID_ARGUMENT naming the flag for an
// unknown kind, an empty list or a partition without netlab.
absl::StatusOr<std::vector<std::string>> SelectFaultKinds(const std::string& kinds, bool netlab);

class PrivateTmpfs;

// Places the daemons of `options` by the placement file at `path`
// (scripts/netlab.sh's NETLAB_PLACEMENT), UCX over TCP. Errors: the file's.
absl::Status PlaceCluster(const std::string& path, tools::LocalClusterOptions& options);

// Mounts a PrivateTmpfs of `size_mib` MiB over options.dir and runs the
// coordinator of `options` in its mount namespace (before any placement
// prefix), so that its state file is on it. The caller keeps the tmpfs for
// as long as the coordinator runs.
absl::StatusOr<std::unique_ptr<PrivateTmpfs>> PutCoordinatorOnTmpfs(
    int64_t size_mib, tools::LocalClusterOptions& options);

// A tmpfs of `size_mib` MiB mounted over `dir` (created if missing) in a
// mount namespace of its own (private propagation: nothing changes for any
// other process), held by a sleeping child. Daemons started under
// enter_prefix() see the tmpfs at `dir`, and so does a daemon restarted
// later under the same prefix: what it wrote there survives the restart.
// Needs root (unshare -m, mount).
class PrivateTmpfs {
 public:
  static absl::StatusOr<std::unique_ptr<PrivateTmpfs>> Mount(const std::string& dir,
                                                             int64_t size_mib);

  // A command prefix that runs its command in the tmpfs's mount namespace
  // (`nsenter -t PID -m --`).
  std::vector<std::string> enter_prefix() const;

  // `dir`/`name` as this process reaches it (through /proc/PID/root).
  std::string path(const std::string& name) const;

 private:
  PrivateTmpfs(std::unique_ptr<tools::Subprocess> holder, std::string dir)
      : holder_(std::move(holder)), dir_(std::move(dir)) {}

  std::unique_ptr<tools::Subprocess> holder_;  // killed by its destructor
  const std::string dir_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_FAULT_TOOLS_H_
