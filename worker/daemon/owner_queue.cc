#include "worker/daemon/owner_queue.h"

#include <utility>

namespace gift::worker {

OwnerQueue::OwnerQueue(size_t max_jobs, std::function<void(OwnerJob&)> run)
    : max_jobs_(max_jobs), run_(std::move(run)), thread_([this] { Loop(); }) {}

OwnerQueue::~OwnerQueue() { Stop(); }

bool OwnerQueue::Enqueue(OwnerJob job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  if (jobs_.size() >= max_jobs_) {
    ++dropped_;
    return false;
  }
  jobs_.push_back(std::move(job));
  return true;
}

void OwnerQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    jobs_.clear();
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t OwnerQueue::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

size_t OwnerQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

void OwnerQueue::Loop() {
  while (true) {
    OwnerJob job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !jobs_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    run_(job);
  }
}

}  // namespace gift::worker
