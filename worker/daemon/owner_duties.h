// A worker's duties as the basis owner of some tensors, off the step path:
// what the owner wants of each step (decided on the state before it), the
// step's averages and sketch averages handed over once it completed, and the
// activation statistics the training loop submits; each runs in order on the
// owner queue's thread (owner_queue.h), where the BasisOwner (basis_owner.h)
// folds it into its statistics, builds, selects and publishes bases. After
// every job the owner's latest error ratios go to the session (heartbeats)
// and are kept for metrics. Statistics are best effort: a copy that fails is
// logged (`owner_error`) and left out, a full queue drops (counted); a step
// never waits for the owner.
//
//   OwnerDuties owner(session, &store, {.max_jobs = 64});
//   owner.AddWanted(*before, step, tensors, &owned);        // before the step
//   ... the step ...
//   owner.HandOver(std::move(owned), tensors, seconds, copied, sketch);
//
// Logs: `basis_published`, `owner_error`.
//
// Ownership: owns the BasisOwner and the queue's thread; shares the session
// and the store, which must outlive it. Thread safety: every method may be
// called from any thread; Stop (or the destructor) ends the job in progress
// early and joins the thread.
#ifndef GIFT_WORKER_DAEMON_OWNER_DUTIES_H_
#define GIFT_WORKER_DAEMON_OWNER_DUTIES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/control/member_session.h"
#include "gift/v1/cluster.pb.h"
#include "worker/daemon/owner_queue.h"
#include "worker/intake/device_memory.h"
#include "worker/intake/local_tensor.h"
#include "worker/owner/basis_owner.h"
#include "worker/owner/basis_store.h"

namespace gift::worker {

struct OwnerDutiesOptions {
  codec::CodecOptions codec_options = {};  // the pool is not owned
  // Jobs waiting beyond this are dropped (counted).
  size_t max_jobs = 64;
  // Reads device tensors (may be null: host tensors only).
  const DeviceMemory* memory = nullptr;
};

class OwnerDuties {
 public:
  OwnerDuties(control::MemberSession* session, BasisStore* store, OwnerDutiesOptions options);
  ~OwnerDuties();  // Stop()
  OwnerDuties(const OwnerDuties&) = delete;
  OwnerDuties& operator=(const OwnerDuties&) = delete;

  // Appends what the owner wants of `step` for `tensors` (decided on
  // `before`: one entry per tensor it owns and collects at `step`, with a
  // copy of this worker's own gradient when it needs one). A tensor whose
  // copy fails is left out (logged).
  void AddWanted(const gift::v1::ClusterState& before, uint64_t step,
                 const std::vector<LocalTensor>& tensors, std::vector<OwnedTensorStep>* owned);

  // After the step completed (its averages in `tensors`): queues each of
  // `owned` with its average, read from its tensor, or taken from
  // `copied(i)` for tensor i when that is not null (a device average already
  // read), its sketch average (`sketch(tensor_id)`, maybe empty) and the
  // step's seconds; the state is the session's latest.
  void HandOver(std::vector<OwnedTensorStep> owned, const std::vector<LocalTensor>& tensors,
                double step_seconds, const std::function<const std::vector<float>*(size_t)>& copied,
                const std::function<absl::Span<const float>(uint64_t)>& sketch);

  // Queues an activation Gram matrix (d_in x d_in) of `tensor_id` over
  // `num_samples` samples, under the session's latest state.
  void AddActivationFactor(uint64_t tensor_id, std::vector<float> gram, uint64_t num_samples);

  // The owner's latest error ratio of each tensor it owns.
  std::vector<gift::v1::TensorErrorRatio> error_ratios() const;
  uint64_t publications() const { return publications_.load(); }
  uint64_t jobs_dropped() const { return queue_->dropped(); }

  // Cancels the owner's job in progress, joins the thread and drops the
  // jobs still waiting; idempotent.
  void Stop();

 private:
  void Run(OwnerJob& job);  // on the queue's thread

  control::MemberSession* const session_;
  const OwnerDutiesOptions options_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> publications_{0};
  mutable absl::Mutex mu_;
  std::vector<gift::v1::TensorErrorRatio> error_ratios_ ABSL_GUARDED_BY(mu_);
  // Used only by the queue's thread (but WantsStep, basis_owner.h).
  std::unique_ptr<BasisOwner> owner_;
  // After owner_, which its thread uses (destroyed first).
  std::optional<OwnerQueue> queue_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_OWNER_DUTIES_H_
