// OwnerQueue (worker/daemon/owner_queue.h): jobs run in order on the queue's
// own thread, at most max_jobs wait (more are dropped and counted), and Stop
// ends the thread after the job in progress, dropping the waiting ones.
#include "worker/daemon/owner_queue.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gift::worker {
namespace {

OwnerJob Job(uint64_t tensor) { return OwnerJob{.tensor_id = tensor}; }

TEST(OwnerQueueTest, RunsJobsInOrderOffTheCallersThreadAndDropsBeyondTheBound) {
  absl::Mutex mu;
  std::vector<uint64_t> ran;
  absl::Notification first_started, release;
  const std::thread::id caller = std::this_thread::get_id();
  bool off_caller = true;
  OwnerQueue queue(/*max_jobs=*/2, [&](OwnerJob& job) {
    if (job.tensor_id == 1) {
      first_started.Notify();
      release.WaitForNotification();  // a slow refresh
    }
    absl::MutexLock lock(&mu);
    off_caller = off_caller && std::this_thread::get_id() != caller;
    ran.push_back(job.tensor_id);
  });
  ASSERT_TRUE(queue.Enqueue(Job(1)));
  first_started.WaitForNotification();
  // Job 1 runs; two may wait; the third is dropped.
  EXPECT_TRUE(queue.Enqueue(Job(2)));
  EXPECT_TRUE(queue.Enqueue(Job(3)));
  EXPECT_FALSE(queue.Enqueue(Job(4)));
  EXPECT_EQ(queue.dropped(), 1u);
  EXPECT_EQ(queue.waiting(), 2u);
  release.Notify();
  {
    absl::MutexLock lock(&mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ran.size() == 3; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10)));
    EXPECT_EQ(ran, (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_TRUE(off_caller);
  }
  EXPECT_TRUE(queue.Enqueue(Job(5)));
}

TEST(OwnerQueueTest, StopEndsAfterTheJobInProgressAndDropsTheWaitingOnes) {
  absl::Notification started, release;
  int ran = 0;
  OwnerQueue queue(8, [&](OwnerJob&) {
    ++ran;
    started.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(queue.Enqueue(Job(1)));
  ASSERT_TRUE(queue.Enqueue(Job(2)));
  started.WaitForNotification();
  std::thread stopper([&] { queue.Stop(); });
  absl::SleepFor(absl::Milliseconds(50));
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran, 1);  // job 2 never ran
  EXPECT_FALSE(queue.Enqueue(Job(3)));
  EXPECT_EQ(queue.dropped(), 0u);  // refused after Stop, not dropped for room
  queue.Stop();                    // again: nothing
}

}  // namespace
}  // namespace gift::worker
