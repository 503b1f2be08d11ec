// The basis owner's work off the step path: jobs queued by the worker (a
// completed step's statistics of the tensors this worker owns; an
// activation Gram matrix the training loop submitted) and run in order on a
// thread of the queue's own. At most `max_jobs` wait: beyond that a job is
// dropped and counted, since statistics are best effort and must never
// hold up a step.
//
//   OwnerQueue queue(64, [&](OwnerJob& job) { owner.Observe(...); });
//   if (!queue.Enqueue(std::move(job))) { /* dropped (queue.dropped()) */ }
//
// Ownership: owns its thread, which runs `run`; Stop (or the destructor)
// ends it after the job in progress and drops the jobs still waiting; `run`
// must not call back into the queue. Thread safety: every method may be
// called from any thread.
#ifndef GIFT_WORKER_DAEMON_OWNER_QUEUE_H_
#define GIFT_WORKER_DAEMON_OWNER_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gift/v1/cluster.pb.h"
#include "worker/owner/basis_owner.h"

namespace gift::worker {

struct OwnerJob {
  std::shared_ptr<const gift::v1::ClusterState> state;
  // A completed step's data of a tensor this worker owns; unset: activation
  // statistics (below).
  std::optional<OwnedTensorStep> step;
  uint64_t tensor_id = 0;
  std::vector<float> gram;  // d_in x d_in, row-major
  uint64_t num_samples = 0;
};

class OwnerQueue {
 public:
  OwnerQueue(size_t max_jobs, std::function<void(OwnerJob&)> run);
  ~OwnerQueue();
  OwnerQueue(const OwnerQueue&) = delete;
  OwnerQueue& operator=(const OwnerQueue&) = delete;

  // Queues `job`; false when max_jobs are waiting (dropped, counted) or the
  // queue has stopped.
  bool Enqueue(OwnerJob job);
  // Ends the thread after the job in progress; idempotent (not concurrently
  // with itself).
  void Stop();
  // Jobs dropped because the queue was full.
  uint64_t dropped() const;
  // Jobs waiting (not the one in progress).
  size_t waiting() const;

 private:
  void Loop();

  const size_t max_jobs_;
  const std::function<void(OwnerJob&)> run_;
  mutable absl::Mutex mu_;
  std::deque<OwnerJob> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_OWNER_QUEUE_H_
