// The transport baseline of `gift-bench cluster`: UCX's own ucx_perftest
// (tag_bw) between two processes on loopback, with the cluster's UCX_TLS,
// at a given message size.
//
// Thread safety: a plain function; it starts and waits for two processes.
#ifndef GIFT_BENCH_PERFTEST_BASELINE_H_
#define GIFT_BENCH_PERFTEST_BASELINE_H_

#include <cstdint>
#include <string>

namespace gift::bench {

struct PerftestOptions {
  std::string binary = "ucx_perftest";
  std::string ucx_tls;  // "": UCX's choice
  int iterations = 0;   // 0: 256 MiB worth of messages, 20 to 2000
};

struct PerftestResult {
  std::string label;
  uint64_t message_bytes = 0;
  int iterations = 0;
  double bytes_per_s = 0;  // 0: did not run
  std::string error;
};

// Runs a server and a client and reads the client's final bandwidth. Never
// fails as a whole: a run that cannot start or finish says why in `error`.
PerftestResult RunPerftest(const PerftestOptions& options, const std::string& label,
                           uint64_t bytes);

}  // namespace gift::bench

#endif  // GIFT_BENCH_PERFTEST_BASELINE_H_
