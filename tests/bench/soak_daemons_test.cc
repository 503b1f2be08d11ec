// The soak's verdict on its daemons (bench/soak_daemons.h): each process's
// span after warm-up, and per daemon name whether every process long enough
// to judge ended within 10 % of its first RSS and descriptors.
#include "bench/soak_daemons.h"

#include <gtest/gtest.h>

#include <vector>

namespace gift::bench {
namespace {

// A process sampled every 10 s from `from` to `to` with RSS growing
// linearly from `rss` to `rss_end` and descriptors from `fds` to `fds_end`.
void Sample(std::vector<DaemonSample>& out, const char* daemon, int pid, double from, double to,
            int64_t rss, int64_t rss_end, int fds, int fds_end) {
  for (double t = from; t <= to; t += 10) {
    const double f = (t - from) / (to - from);
    out.push_back({.t_s = t,
                   .daemon = daemon,
                   .pid = pid,
                   .rss_kib = rss + static_cast<int64_t>(f * static_cast<double>(rss_end - rss)),
                   .fds = fds + static_cast<int>(f * (fds_end - fds))});
  }
}

TEST(SoakDaemonsTest, SpansStartAfterTheRunsAndTheProcesssWarmUp) {
  std::vector<DaemonSample> samples;
  Sample(samples, "worker-0", 10, 0, 1000, 100'000, 100'000, 20, 20);
  Sample(samples, "worker-0", 11, 500, 600, 100'000, 100'000, 20, 20);  // a restart
  samples.push_back({.t_s = 700, .daemon = "worker-0", .pid = 11});     // gone: skipped
  const std::vector<DaemonSpan> spans = DaemonSpans(samples, 1000);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].pid, 10);
  EXPECT_EQ(spans[0].first.t_s, 100);  // a tenth of the run
  EXPECT_EQ(spans[0].last.t_s, 1000);
  EXPECT_EQ(spans[1].pid, 11);
  EXPECT_EQ(spans[1].first.t_s, 530);  // 30 s of its own life
  EXPECT_EQ(spans[1].last.t_s, 600);
}

TEST(SoakDaemonsTest, EveryJudgedProcessMustEndWithinTheTolerance) {
  std::vector<DaemonSample> samples;
  // server-0: +5 % RSS, one descriptor more of 25: flat.
  Sample(samples, "server-0", 20, 0, 1000, 100'000, 105'000, 25, 26);
  // worker-1: flat first life, then a restart that leaks (+50 % over 400 s).
  Sample(samples, "worker-1", 30, 0, 400, 80'000, 80'000, 20, 20);
  Sample(samples, "worker-1", 31, 400, 1000, 80'000, 120'000, 20, 20);
  // coordinator: descriptors 10 -> 14 (+40 %).
  Sample(samples, "coordinator", 40, 0, 1000, 50'000, 50'000, 10, 14);
  // worker-2: a short life (100 s after warm-up) that doubles: counted, not judged.
  Sample(samples, "worker-2", 50, 800, 930, 60'000, 120'000, 20, 20);
  const std::vector<DaemonVerdict> v = JudgeDaemons(DaemonSpans(samples, 1000));
  ASSERT_EQ(v.size(), 4u);  // in name order
  EXPECT_EQ(v[0].daemon, "coordinator");
  EXPECT_FALSE(v[0].flat);
  EXPECT_EQ(v[0].fd_change, 4);
  EXPECT_EQ(v[1].daemon, "server-0");
  EXPECT_TRUE(v[1].flat);
  EXPECT_NEAR(v[1].rss_change, 0.05 * 0.9, 0.005);  // from the sample at 100 s
  EXPECT_EQ(v[2].daemon, "worker-1");
  EXPECT_EQ(v[2].processes, 2);
  EXPECT_EQ(v[2].judged, 2);
  EXPECT_FALSE(v[2].flat);
  EXPECT_GT(v[2].rss_change, 0.4);
  EXPECT_EQ(v[3].daemon, "worker-2");
  EXPECT_EQ(v[3].judged, 0);
  EXPECT_TRUE(v[3].flat);
  // A looser rule passes what the default does not.
  const std::vector<DaemonVerdict> loose =
      JudgeDaemons(DaemonSpans(samples, 1000), {.min_span_s = 200, .tolerance = 0.6});
  EXPECT_TRUE(loose[0].flat);
  EXPECT_TRUE(loose[2].flat);
}

}  // namespace
}  // namespace gift::bench
