#include "common/base/thread_pool.h"

#include <atomic>
#include <memory>

namespace gift {

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) {
    num_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  }
  workers_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPool* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stopping_ || !p->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

namespace {

// Shared by the caller and the helpers of one ParallelFor call.
struct LoopState {
  explicit LoopState(size_t n, const std::function<void(size_t)>& f) : total(n), fn(f) {}
  const size_t total;
  const std::function<void(size_t)>& fn;
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  size_t done ABSL_GUARDED_BY(mu) = 0;

  void RunSome() {
    size_t finished = 0;
    for (size_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
      fn(i);
      ++finished;
    }
    if (finished > 0) {
      absl::MutexLock lock(&mu);
      done += finished;
    }
  }
};

}  // namespace

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  auto state = std::make_shared<LoopState>(n, fn);
  const size_t helpers = std::min(workers_.size(), n - 1);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < helpers; ++i) {
      queue_.emplace_back([state] { state->RunSome(); });
    }
  }
  state->RunSome();
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](LoopState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->done == s->total; },
      state.get()));
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void ParallelFor(ThreadPool* pool, size_t n, const std::function<void(size_t)>& fn) {
  if (pool == nullptr || n < 2) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool->ParallelFor(n, fn);
}

}  // namespace gift
