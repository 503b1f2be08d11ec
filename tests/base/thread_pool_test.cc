#include "common/base/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace gift {
namespace {

TEST(ThreadPool, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 2u, 3u, 100u, 10000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, NullPoolRunsInline) {
  std::vector<int> order;
  ParallelFor(nullptr, 5, [&](size_t i) { order.push_back(static_cast<int>(i)); });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(ThreadPool, NestedAndConcurrentLoopsFinish) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.ParallelFor(8, [&](size_t) { pool.ParallelFor(8, [&](size_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 64);
}

TEST(ThreadPool, ScheduledTasksRunOnWorkersAndDestructionRunsTheRest) {
  std::atomic<int> ran{0};
  std::atomic<bool> off_caller{true};
  const std::thread::id caller = std::this_thread::get_id();
  {
    ThreadPool pool(2);
    for (int i = 0; i < 100; ++i) {
      pool.Schedule([&] {
        if (std::this_thread::get_id() == caller) off_caller = false;
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 100);
  EXPECT_TRUE(off_caller.load());
}

}  // namespace
}  // namespace gift
