// The CPUs a daemon runs on (gift-worker --cpus): a list such as "0-3,8"
// parsed, and applied to every thread of the process, so that a worker's
// codec, BLAS, UCX and gRPC threads stay off the cores the training process
// computes on. sched_setaffinity is per thread: PinProcessToCpus sets it on
// every task of /proc/self/task (threads already started, such as
// OpenBLAS's pool, which it starts when loaded), and threads started later
// inherit it from their creator.
//
// Thread safety: PinProcessToCpus may run concurrently with threads starting
// or ending; a thread started during the call inherits either affinity
// (call it before starting threads of your own).
#ifndef GIFT_COMMON_DAEMON_CPU_AFFINITY_H_
#define GIFT_COMMON_DAEMON_CPU_AFFINITY_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gift::daemon {

// Comma-separated CPU numbers and inclusive ranges ("0-3,8,10-11"), each in
// [0, 1023]; the result sorted and without duplicates. InvalidArgument
// naming the bad part otherwise (empty list, a reversed range, junk).
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

// Sets every thread of the process to run only on `cpus` (each in [0,
// 1023]). FailedPrecondition, changing nothing, when one of them is not
// available to the process (offline, or outside its cgroup's cpuset); the
// error of sched_setaffinity otherwise.
absl::Status PinProcessToCpus(absl::Span<const int> cpus);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_CPU_AFFINITY_H_
