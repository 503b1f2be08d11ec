// What `gift-bench soak` (bench/soak.h) found: its counts, every fault with
// its stall, and the daemons' RSS and open descriptors over time; printed as
// tables and written as JSON.
//
// Thread safety: plain values and free functions; no shared state.
#ifndef GIFT_BENCH_SOAK_REPORT_H_
#define GIFT_BENCH_SOAK_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/soak_daemons.h"

namespace gift::bench {

struct SoakFault {
  std::string kind;
  int victim = -1;     // worker or server index; -1 for the coordinator and spoofs
  double stall_s = 0;  // from the fault to the step's last result (bench/soak.h)
  uint64_t step = 0;
};

// `pid`'s VmRSS and open descriptors, read from /proc.
DaemonSample SampleDaemon(double t_s, const std::string& daemon, int pid);

// How many lines of the log file at `path` carry event `event` (0 when the
// file cannot be read).
int CountLogEvents(const std::string& path, const std::string& event);

struct SoakTotals {
  double seconds = 0;
  std::string hierarchy;
  uint64_t steps = 0, steps_completed = 0;
  int lost = 0, doubled = 0, failed = 0;
  int refused = 0;  // admission refusals of a worker no fault evicted
  int rejoins = 0;  // admission refusals of a fault's victim
  double gift_bound = 0, gift_max_rel_error = 0;
  int gift_out_of_bound = 0;
  int restart_retries = 0, spoof_errors = 0;
  // The coordinator's rolled_back events (a commit failed, e.g. on a full
  // disk, and its state was restored from the store).
  int coordinator_rollbacks = 0;
  std::vector<uint64_t> bad_steps;
  std::vector<std::string> errors;   // the first calls that failed
  std::vector<std::string> crashes;  // daemons that exited on their own

  bool clean() const {
    return lost == 0 && doubled == 0 && failed == 0 && refused == 0 && gift_out_of_bound == 0 &&
           crashes.empty();
  }
};

// The counts, the stalls per fault kind (count, max, median) and, per daemon
// name, whether its RSS and fds stayed flat (JudgeDaemons,
// bench/soak_daemons.h: every process of it sampled over 200 s or more
// after warm-up ends within 10 % of its first values), with the largest
// changes; then a line saying whether every daemon did.
void PrintSoakReport(const SoakTotals& totals, const std::vector<SoakFault>& faults,
                     const std::vector<DaemonSample>& samples);

// Everything above, every fault, every process's span and every sample,
// as JSON.
absl::Status WriteSoakJson(const std::string& path, const SoakTotals& totals,
                           const std::vector<SoakFault>& faults,
                           const std::vector<DaemonSample>& samples);

}  // namespace gift::bench

#endif  // GIFT_BENCH_SOAK_REPORT_H_
