// --cpus (common/daemon/cpu_affinity.h): the list syntax, and every thread
// of the process pinned, one started before the call included.
#include "common/daemon/cpu_affinity.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace gift::daemon {
namespace {

TEST(ParseCpuListTest, NumbersAndRangesSortedWithoutDuplicates) {
  EXPECT_EQ(*ParseCpuList("3"), (std::vector<int>{3}));
  EXPECT_EQ(*ParseCpuList("8,0-2,2,10-11"), (std::vector<int>{0, 1, 2, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList("5-5"), (std::vector<int>{5}));
  for (const char* bad : {"", ",", "a", "1-", "-1", "3-1", "0-1024", "1,,2", "1 2", "2.5"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseCpuList(bad).status())) << "'" << bad << "'";
  }
}

std::vector<int> AffinityOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(tid, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

TEST(PinProcessToCpusTest, EveryThreadRunsOnTheListedCpusOnly) {
  const std::vector<int> before = AffinityOf(0);
  ASSERT_FALSE(before.empty());
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread started_before([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    while (!done) std::this_thread::yield();
  });
  while (tid == 0) std::this_thread::yield();
  const std::vector<int> one = {before.back()};
  ASSERT_TRUE(PinProcessToCpus(one).ok());
  EXPECT_EQ(AffinityOf(0), one);
  EXPECT_EQ(AffinityOf(tid), one) << "a thread started before the call";
  std::vector<int> inherited;
  std::thread([&] { inherited = AffinityOf(0); }).join();
  EXPECT_EQ(inherited, one) << "a thread started after the call";
  done = true;
  started_before.join();
  ASSERT_TRUE(PinProcessToCpus(before).ok());  // as it was, for the other tests
  EXPECT_EQ(AffinityOf(0), before);
}

TEST(PinProcessToCpusTest, ACpuTheProcessMayNotUseIsRefusedChangingNothing) {
  const std::vector<int> before = AffinityOf(0);
  // CPU 1023: no such CPU here (a cpu_set_t's last).
  EXPECT_TRUE(absl::IsFailedPrecondition(PinProcessToCpus({1023})));
  EXPECT_TRUE(absl::IsFailedPrecondition(PinProcessToCpus({before.front(), 1023})));
  EXPECT_TRUE(absl::IsInvalidArgument(PinProcessToCpus({})));
  EXPECT_TRUE(absl::IsInvalidArgument(PinProcessToCpus({1024})));
  EXPECT_EQ(AffinityOf(0), before);
}

}  // namespace
}  // namespace gift::daemon
