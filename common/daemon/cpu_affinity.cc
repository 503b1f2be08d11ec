#include "common/daemon/cpu_affinity.h"

#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gift::daemon {
namespace {

constexpr int kMaxCpu = 1023;  // what a cpu_set_t holds

absl::StatusOr<int> ParseCpu(absl::string_view text, absl::string_view part) {
  int cpu = 0;
  if (!absl::SimpleAtoi(text, &cpu) || cpu < 0 || cpu > kMaxCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", part, "' is not a CPU number in [0, ", kMaxCpu, "] or a range A-B"));
  }
  return cpu;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("an empty CPU list");
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const size_t dash = part.find('-');
    if (dash == absl::string_view::npos) {
      absl::StatusOr<int> cpu = ParseCpu(part, part);
      if (!cpu.ok()) return cpu.status();
      cpus.push_back(*cpu);
      continue;
    }
    absl::StatusOr<int> first = ParseCpu(part.substr(0, dash), part);
    if (!first.ok()) return first.status();
    absl::StatusOr<int> last = ParseCpu(part.substr(dash + 1), part);
    if (!last.ok()) return last.status();
    if (*last < *first) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is a reversed range"));
    }
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

absl::Status PinProcessToCpus(absl::Span<const int> cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("no CPU to run on");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu > kMaxCpu) {
      return absl::InvalidArgumentError(absl::StrCat("CPU ", cpu, " is out of range"));
    }
    CPU_SET(cpu, &set);
  }
  // The calling thread first: the kernel keeps only the CPUs the process's
  // cpuset permits (all of them refused: EINVAL), so read back what it got
  // and undo it unless that is every CPU asked for.
  cpu_set_t before;
  CPU_ZERO(&before);
  if (sched_getaffinity(0, sizeof(before), &before) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    if (errno == EINVAL) {
      return absl::FailedPreconditionError(
          "none of these CPUs is available to this process (online and in its cgroup)");
    }
    return absl::InternalError(absl::StrCat("sched_setaffinity: ", std::strerror(errno)));
  }
  cpu_set_t got;
  CPU_ZERO(&got);
  if (sched_getaffinity(0, sizeof(got), &got) != 0 || !CPU_EQUAL(&got, &set)) {
    std::string missing;
    for (int cpu : cpus) {
      if (!CPU_ISSET(cpu, &got)) absl::StrAppend(&missing, missing.empty() ? "" : ",", cpu);
    }
    (void)sched_setaffinity(0, sizeof(before), &before);
    return absl::FailedPreconditionError(absl::StrCat(
        "CPU ", missing, " is not available to this process (online and in its cgroup)"));
  }
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(task.path().filename().string(), &tid)) continue;
    // A thread that ended since the listing is not an error.
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return absl::InternalError(
          absl::StrCat("sched_setaffinity of thread ", tid, ": ", std::strerror(errno)));
    }
  }
  if (error) return absl::InternalError(absl::StrCat("/proc/self/task: ", error.message()));
  return absl::OkStatus();
}

}  // namespace gift::daemon
