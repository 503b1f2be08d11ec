// The soak's verdict on its daemons' memory and descriptors: whether every
// daemon stayed flat over a long run (its RSS and open descriptors at the
// end within 10 % of their values after warm-up), from the samples that
// `gift-bench soak` takes (bench/soak.h) of every daemon process, restarts
// included (a restarted daemon is a new process under the same name).
//
//   std::vector<DaemonSpan> spans = DaemonSpans(samples, run_seconds);
//   for (const DaemonVerdict& v : JudgeDaemons(spans)) ... v.flat ...
//
// Thread safety: plain values and pure functions.
#ifndef GIFT_BENCH_SOAK_DAEMONS_H_
#define GIFT_BENCH_SOAK_DAEMONS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gift::bench {

struct DaemonSample {
  double t_s = 0;  // since the soak started
  std::string daemon;
  int pid = 0;
  int64_t rss_kib = -1;  // -1: the process was gone
  int fds = -1;
};

// One process between its first sample after warm-up and its last.
struct DaemonSpan {
  std::string daemon;
  int pid = 0;
  DaemonSample first, last;
  double seconds() const { return last.t_s - first.t_s; }
};

// A process's own warm-up: its first samples are of a daemon still
// connecting to its peers.
inline constexpr double kProcessWarmUpS = 30;

// Per process (daemon name, pid), ordered by name then pid: its first
// sample at or after the warm-up (a tenth of the `run_s`-second run, and
// kProcessWarmUpS of the process's own life) and its last. Samples of a
// process that was gone are skipped; a process with none after its
// warm-up has no span.
std::vector<DaemonSpan> DaemonSpans(const std::vector<DaemonSample>& samples, double run_s);

struct FlatnessRule {
  // Processes sampled over less than this after warm-up are counted, not
  // judged (a short life says nothing about a leak).
  double min_span_s = 200;
  // Flat: RSS and descriptors at the end within this fraction of the first.
  double tolerance = 0.10;
};

struct DaemonVerdict {
  std::string daemon;
  int processes = 0;  // spans under this name
  int judged = 0;     // of them, sampled over at least min_span_s
  // Over the judged processes: the RSS change (end / first - 1) and the
  // descriptor change (end - first) of the largest magnitude.
  double rss_change = 0;
  int fd_change = 0;
  // Every judged process within the tolerance (true when none is judged).
  bool flat = true;
};

// One verdict per daemon name, in name order.
std::vector<DaemonVerdict> JudgeDaemons(const std::vector<DaemonSpan>& spans,
                                        const FlatnessRule& rule = {});

}  // namespace gift::bench

#endif  // GIFT_BENCH_SOAK_DAEMONS_H_
