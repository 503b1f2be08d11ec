// A fixed-size pool of worker threads for data-parallel loops.
//
// Ownership: the caller owns the pool; there is no process-wide instance.
// Components that want parallelism take a `ThreadPool*` (nullptr means "run
// on the calling thread").
//
// Thread safety: ParallelFor may be called from several threads at once; the
// calls share the workers. The calling thread always takes part in its own
// loop, so a ParallelFor issued from inside a pool task cannot deadlock.
#ifndef GIFT_COMMON_BASE_THREAD_POOL_H_
#define GIFT_COMMON_BASE_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace gift {

class ThreadPool {
 public:
  // Starts `num_threads` workers; 0 means one per hardware thread. The
  // calling thread of ParallelFor is extra, so a pool of N - 1 workers keeps
  // N cores busy.
  explicit ThreadPool(size_t num_threads = 0);
  ~ThreadPool();  // Finishes queued tasks, then joins the workers.

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of worker threads (not counting callers).
  size_t size() const { return workers_.size(); }

  // Runs fn(i) for every i in [0, n) and returns when all have finished.
  // Indices are claimed dynamically, so uneven tasks balance themselves.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  // Queues `task` to run once on a worker and returns at once (tasks start
  // in the order queued). The destructor runs the tasks still queued.
  void Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// Runs fn(i) for i in [0, n) on `pool`, or inline when pool is null or n < 2.
void ParallelFor(ThreadPool* pool, size_t n, const std::function<void(size_t)>& fn);

}  // namespace gift

#endif  // GIFT_COMMON_BASE_THREAD_POOL_H_
