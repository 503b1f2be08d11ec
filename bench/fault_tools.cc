#include "bench/fault_tools.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace gift::bench {

const std::vector<std::string>& FaultKinds() {
  static const auto* kinds = new std::vector<std::string>{
      "worker-kill",      "worker-stop",      "server-kill",           "server-stop",
      "coordinator-kill", "coordinator-stop", "coordinator-disk-full", "spoof",
      "worker-partition", "server-partition"};
  return *kinds;
}

bool IsPartition(absl::string_view kind) { return absl::EndsWith(kind, "-partition"); }

absl::StatusOr<std::vector<std::string>> SelectFaultKinds(const std::string& kinds, bool netlab) {
  std::vector<std::string> selected;
  if (kinds == "all") {
    for (const std::string& k : FaultKinds()) {
      if (IsPartition(k) && !netlab) {
        std::fprintf(stderr, "%s: skipped (needs --placement and --bridge-netns)\n", k.c_str());
      } else if (k == "coordinator-disk-full" && geteuid() != 0) {
        std::fprintf(stderr, "%s: skipped (needs root: unshare -m and mount)\n", k.c_str());
      } else {
        selected.push_back(k);
      }
    }
    return selected;
  }
  for (absl::string_view k : absl::StrSplit(kinds, ',', absl::SkipEmpty())) {
    if (std::find(FaultKinds().begin(), FaultKinds().end(), k) == FaultKinds().end()) {
      return absl::InvalidArgumentError(absl::StrCat("--kinds: unknown fault kind '", k, "'"));
    }
    if (IsPartition(k) && !netlab) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kinds: ", k,
                       " needs --placement and --bridge-netns (run under scripts/netlab.sh exec)"));
    }
    selected.emplace_back(k);
  }
  if (selected.empty()) return absl::InvalidArgumentError("--kinds: no fault kind given");
  return selected;
}

absl::Status FillDisk(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot create ", path));
  const std::vector<char> block(64 << 10, 0);
  size_t written = 0;
  while (written < (size_t{1} << 30) &&
         std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
    written += block.size();
  }
  std::fclose(f);
  if (written >= (size_t{1} << 30)) {
    return absl::InternalError(absl::StrCat("1 GiB went into ", path, " without filling it"));
  }
  return absl::OkStatus();
}

absl::Status SetBridgePort(const std::string& bridge_netns, const std::string& port, bool up) {
  const char* state = up ? "up" : "down";
  absl::StatusOr<std::unique_ptr<tools::Subprocess>> ip =
      tools::Subprocess::Start({"/usr/sbin/ip", "-n", bridge_netns, "link", "set", port, state});
  if (!ip.ok()) return ip.status();
  absl::StatusOr<int> code = (*ip)->WaitForExit(absl::Seconds(10));
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return absl::InternalError(
        absl::StrCat("ip link set ", port, " ", state, ": ", (*ip)->stderr_text()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PrivateTmpfs>> PrivateTmpfs::Mount(const std::string& dir,
                                                                  int64_t size_mib) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  absl::StatusOr<std::unique_ptr<tools::Subprocess>> holder = tools::Subprocess::Start(
      {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
       "mount -t tmpfs -o size=\"$1\"m gift-faults \"$0\" && echo mounted && exec sleep infinity",
       dir, absl::StrCat(size_mib)},
      {.parent_death_signal = SIGKILL});
  if (!holder.ok()) return holder.status();
  absl::StatusOr<std::string> line = (*holder)->WaitForLine(
      [](const std::string& l) { return absl::StrContains(l, "mounted"); }, absl::Seconds(10));
  if (!line.ok()) {
    return absl::InternalError(absl::StrCat("a tmpfs over ", dir, " could not be mounted: ",
                                            (*holder)->stderr_text(), line.status().message()));
  }
  return std::unique_ptr<PrivateTmpfs>(new PrivateTmpfs(*std::move(holder), dir));
}

absl::Status PlaceCluster(const std::string& path, tools::LocalClusterOptions& options) {
  absl::StatusOr<tools::ClusterPlacement> placement = tools::ClusterPlacement::FromJsonFile(path);
  if (!placement.ok()) return placement.status();
  options.placement = *std::move(placement);
  options.ucx_tls = "tcp";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PrivateTmpfs>> PutCoordinatorOnTmpfs(
    int64_t size_mib, tools::LocalClusterOptions& options) {
  absl::StatusOr<std::unique_ptr<PrivateTmpfs>> tmpfs = PrivateTmpfs::Mount(options.dir, size_mib);
  if (!tmpfs.ok()) return tmpfs.status();
  std::vector<std::string>& prefix = options.placement.coordinator.prefix;
  const std::vector<std::string> enter = (*tmpfs)->enter_prefix();
  prefix.insert(prefix.begin(), enter.begin(), enter.end());
  return tmpfs;
}

std::vector<std::string> PrivateTmpfs::enter_prefix() const {
  return {"/usr/bin/nsenter", "-t", absl::StrCat(holder_->pid()), "-m", "--"};
}

std::string PrivateTmpfs::path(const std::string& name) const {
  return absl::StrCat("/proc/", holder_->pid(), "/root", dir_, "/", name);
}

}  // namespace gift::bench
