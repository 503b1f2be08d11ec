// What a worker does about the other workers of its job, from the cluster
// states it plans its steps with (issue: membership changes are never
// silent, a peer that cannot push fails the others' step at once):
//   - a worker of the state whose registration the coordinator refused
//     (Member.registration_error) cannot push: Check fails the step
//     FAILED_PRECONDITION naming it, whatever the policy;
//   - a worker that was in the epoch of this worker's previous completed
//     step and is gone (left, evicted, or joined again as a new member) is
//     lost. Under Policy.on_member_loss FAIL, Check fails every step
//     FAILED_PRECONDITION naming the lost workers, until Reset (the training
//     process registers its buffers again: a new run). Under CONTINUE,
//     Completed fills the step's response with the previous world size and
//     the lost workers and logs `world_size_changed`.
// A worker's own earlier membership (the same name: it lost its lease and
// joined again) is not a lost peer; the admit step handles that case.
//
//   guard.Observe(state);                       // every state a step plans with
//   if (auto s = guard.Check(*state, step, me); !s.ok()) return s;
//   ... the step completes in epoch e ...
//   guard.Completed(e, me, &response);
//
// Thread safety: every method may be called from any thread.
#ifndef GIFT_WORKER_DAEMON_MEMBERSHIP_GUARD_H_
#define GIFT_WORKER_DAEMON_MEMBERSHIP_GUARD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/worker.pb.h"

namespace gift::worker {

// The workers of `before` that `after` lacks (by member id), except
// `self_name`'s earlier membership; ascending rank (their ranks in `before`).
std::vector<gift::v1::Member> LostWorkers(const gift::v1::ClusterState& before,
                                          const gift::v1::ClusterState& after,
                                          const std::string& self_name);

// "rank 1 (worker-1, m4 on node-b)" for each, comma-separated.
std::string DescribeWorkers(const std::vector<gift::v1::Member>& workers);

class MembershipGuard {
 public:
  // Remembers `state` as the one of its epoch (the last few epochs are kept).
  void Observe(std::shared_ptr<const gift::v1::ClusterState> state);

  // OK, or FAILED_PRECONDITION: a worker of `state` other than `self_id`
  // whose registration was refused; under on_member_loss FAIL, workers
  // lost since the previous completed step.
  absl::Status Check(const gift::v1::ClusterState& state, uint64_t step,
                     const std::string& self_id) const;

  // The step completed in `epoch` (a state of it was observed): when the
  // world changed since the previous completed step, sets the response's
  // previous_world_size and lost_members and logs it. The step's epoch
  // becomes the baseline.
  void Completed(uint64_t epoch, const std::string& self_id, gift::v1::PushPullResponse* response);

  // A new run: no baseline (nothing is lost before the next completed step).
  void Reset();

 private:
  // The name of `self_id` in `state`, or "".
  static std::string NameOf(const gift::v1::ClusterState& state, const std::string& self_id);

  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<const gift::v1::ClusterState>> by_epoch_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const gift::v1::ClusterState> baseline_ ABSL_GUARDED_BY(mu_);
  std::string self_name_ ABSL_GUARDED_BY(mu_);  // this worker's name at the baseline
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_MEMBERSHIP_GUARD_H_
