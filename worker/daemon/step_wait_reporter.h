// Says, while a step waits, which ranks it waits for (issue: a missing rank
// must be findable). The worker's PushPull brackets each step with Begin /
// End; the session's heartbeats then report the step as begun
// (HeartbeatRequest.waiting_step) and bring back the coordinator's answer of
// which workers of the epoch have neither completed nor begun it
// (StepWait). This class adds the timing a training job needs:
//   - after `beat_after` in the step it sends one heartbeat at once, so the
//     coordinator (and the other ranks' reports) know the step began without
//     waiting for the lease thread's next beat;
//   - after `log_after` it asks again and logs `step_waiting` {step,
//     waited_s, waiting_for} (the missing ranks with names, member ids,
//     nodes and last steps, or that every rank began it and the servers'
//     results are what is missing), and again every `log_every` while the
//     wait goes on;
//   - Describe() is the same text for an error (DEADLINE_EXCEEDED).
//
// Ownership: shares the session, which must outlive this. Thread safety:
// every method may be called from any thread; one background thread.
#ifndef GIFT_WORKER_DAEMON_STEP_WAIT_REPORTER_H_
#define GIFT_WORKER_DAEMON_STEP_WAIT_REPORTER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "gift/v1/coordinator.pb.h"

namespace gift::worker {

// "rank 1 (worker-1, m4 on node-b, last step 11)[, ...]" of wait.missing();
// "every rank began step S (the servers' results are missing)" when empty.
std::string DescribeStepWait(const gift::v1::StepWait& wait);

struct StepWaitReporterOptions {
  absl::Duration beat_after = absl::Seconds(1);
  absl::Duration log_after = absl::Seconds(3);
  absl::Duration log_every = absl::Seconds(10);
};

class StepWaitReporter {
 public:
  StepWaitReporter(control::MemberSession* session, StepWaitReporterOptions options = {});
  ~StepWaitReporter();
  StepWaitReporter(const StepWaitReporter&) = delete;
  StepWaitReporter& operator=(const StepWaitReporter&) = delete;

  // The step `step` (> 0) began / ended (End: whatever the outcome).
  void Begin(uint64_t step);
  void End();
  // The step in progress; 0 when none.
  uint64_t step() const;

  // Asks the coordinator now (one heartbeat) and describes who `step` waits
  // for (DescribeStepWait), or "" when it cannot tell (no answer for that
  // step: the coordinator is unreachable, or the step is not in progress).
  std::string Describe(uint64_t step);

 private:
  void Loop();

  control::MemberSession* const session_;
  const StepWaitReporterOptions options_;

  mutable absl::Mutex mu_;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time began_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_WAIT_REPORTER_H_
