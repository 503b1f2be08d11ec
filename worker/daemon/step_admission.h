// Which steps a worker may begin, and whether one is in flight.
//
// A new step (a PushPull, or the first StartTensors of a step) is admitted
// when the worker is not draining (Unavailable), its number in the run of the
// registered buffers (run_steps.h) fits the cluster's numbering
// (kMaxTrainingStep) and is above the last step completed (InvalidArgument,
// saying how a new run begins and naming the run's connected clients), and it
// is not below this member's admit step (FailedPrecondition, CheckAdmitted).
// The first step of a worker of a starting cluster also waits until
// `min_workers` workers have joined (the start barrier).
//
// Drain refuses new steps from then on and waits until none is in flight: a
// PushPull between BeginStep and the end of its InFlight, or a step opened by
// StartTensors (SetOpen) until it is finished or abandoned.
//
// Ownership: shares the session, which must outlive it. Thread safety:
// thread-safe.
#ifndef GIFT_WORKER_DAEMON_STEP_ADMISSION_H_
#define GIFT_WORKER_DAEMON_STEP_ADMISSION_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "worker/daemon/run_steps.h"

namespace gift::worker {

class StepAdmission {
 public:
  StepAdmission(const control::MemberSession* session, uint32_t min_workers)
      : session_(session), min_workers_(min_workers) {}

  // The cluster step of the run's step `run_step`, when a step of that
  // number may begin now (errors above).
  absl::StatusOr<uint64_t> Admit(uint64_t run_step) const;

  // The start barrier of `step` (the cluster's number): waits, until
  // `deadline`, for min_workers workers when this is the worker's first step
  // in a starting cluster (not for a member admitted at a later step, which
  // joined a running one); logs `start_barrier_waiting` when it has to.
  // DeadlineExceeded naming how many joined.
  absl::Status AwaitStartBarrier(uint64_t step, absl::Time deadline) const;

  // The run of the registered buffers (RegisterBuffers sets it).
  void SetRun(RunSteps run);
  RunSteps run() const;

  // The last step completed (the cluster's number), none before the first.
  void Completed(uint64_t step);
  std::optional<uint64_t> last_step() const;

  // A PushPull in flight from BeginStep until the InFlight is destroyed.
  class InFlight {
   public:
    explicit InFlight(StepAdmission* admission) : admission_(admission) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight();

   private:
    StepAdmission* const admission_;
  };
  [[nodiscard]] InFlight BeginStep();
  // Whether a step opened by StartTensors is in flight.
  void SetOpen(bool open);

  // Refuses new steps (Unavailable) from now on and waits until no step is
  // in flight; false when `timeout` passed first.
  bool Drain(absl::Duration timeout);

 private:
  const control::MemberSession* const session_;
  const uint32_t min_workers_;
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool in_step_ ABSL_GUARDED_BY(mu_) = false;
  bool step_open_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<uint64_t> last_step_ ABSL_GUARDED_BY(mu_);  // the cluster's numbering
  RunSteps run_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_ADMISSION_H_
