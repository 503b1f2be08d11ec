// One exchange of a step's tensors through the push-pull engine, run again
// until it succeeds: planned from the cluster state (step_planner.h, with the
// bases of the BasisStore and the data-plane keys of the plan's epoch), run,
// and, when the failure is retryable (an epoch ended under the step, a server
// went away: Aborted, Unavailable), planned and run again, under the same
// epoch at once when that is exact-once (step_retry.h), else once the cluster
// has moved to a new epoch. Before every attempt it checks what may have
// changed meanwhile: this member's admission (a re-join during the step), the
// run of the buffers, and peers that cannot push (membership_guard.h). A
// state that cannot plan the step yet (a basis version not committed, the
// schedule not frozen that far, no keys yet) is waited out; a coordinator
// that is down for a moment is tried again. All of it within the deadline.
//
// The exchanges of a step (step_key.h): its gradients (kGradients, with the
// plan's codecs and bases), the exact FP32 averages of a measured step
// (kExactMeasure, FP32) and the per-worker sketches (kSketches, in the
// policy's statistics codec), the last two
// direct, under their own step keys.
//
//   StepExchange exchange(engine, session, &store, &membership,
//                         {.run = ..., .last_step = ...});
//   absl::StatusOr<Exchanged> done =
//       exchange.Run(step, tensors, ExchangeKind::kGradients, deadline);
//
// Ownership: shares the engine, session, store and guard, which must outlive
// it. Thread safety: Run and Plan from one thread at a time (the worker's
// step lock); retries() and CountRetry from any.
#ifndef GIFT_WORKER_DAEMON_STEP_EXCHANGE_H_
#define GIFT_WORKER_DAEMON_STEP_EXCHANGE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/control/member_session.h"
#include "gift/v1/cluster.pb.h"
#include "worker/daemon/membership_guard.h"
#include "worker/daemon/run_steps.h"
#include "worker/daemon/step_key.h"
#include "worker/engine/push_pull_engine.h"
#include "worker/owner/basis_store.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {

// What an exchange ran under, once it succeeded.
struct Exchanged {
  StepReport report;
  uint64_t epoch = 0;
  uint32_t world_size = 0;
  // Per tensor, in the exchange's order: (basis version, transformed).
  std::vector<std::pair<uint64_t, bool>> versions;
  // Appends `tensors`' (basis version, transformed).
  void AddVersions(absl::Span<const TensorStep> tensors);
};

class StepExchange {
 public:
  // What the exchange reads of its worker before every attempt.
  struct WorkerView {
    std::function<RunSteps()> run;                       // the registered buffers' run
    std::function<std::optional<uint64_t>()> last_step;  // the last step completed
  };

  StepExchange(PushPullEngine* engine, control::MemberSession* session, BasisStore* store,
               MembershipGuard* membership, WorkerView worker);

  // Runs one exchange of `tensors` for `step` (the cluster's numbering)
  // until `deadline`; `result_timeout` bounds each attempt's wait for
  // results (StepPlan::result_timeout). Errors (those of an exchange other
  // than the gradients prefixed "the sketches of step N (key K): "):
  // DeadlineExceeded (naming the last reason the coordinator could not be
  // reached), FailedPrecondition
  // (below the admit step, the run ended: CheckAdmitted, RunSteps), the
  // membership guard's, and a non-retryable failure of the engine.
  absl::StatusOr<Exchanged> Run(uint64_t step, const std::vector<LocalTensor>& tensors,
                                ExchangeKind exchange, absl::Time deadline,
                                std::optional<absl::Duration> result_timeout = std::nullopt);

  // The plan of `step` for `tensors` under `state` (PlanStep over the basis
  // store), with the data-plane keys of its epoch (the session holds those
  // of every epoch it installed a state of). FailedPrecondition, to wait for
  // a later state: PlanStep's, or authentication on and no keys yet.
  absl::StatusOr<StepPlan> Plan(const gift::v1::ClusterState& state, uint64_t step,
                                const std::vector<LocalTensor>& tensors);

  // Waits (until `deadline` at most) for the session to hold a state of an
  // epoch after `ended`: a step some of whose chunks went out under `ended`
  // may run again only then, since the servers count a rank once per epoch.
  void WaitForEpochAfter(uint64_t ended, absl::Time deadline);

  // Attempts run again under a new epoch (or the same one), by Run and by
  // callers that retry on their own (CountRetry).
  uint64_t retries() const { return retries_.load(); }
  void CountRetry() { retries_.fetch_add(1); }

  // Aborted / Unavailable: the step may succeed under a new epoch.
  static bool Retryable(const absl::Status& s);

 private:
  // Run's attempts; Run adds which exchange of which step failed.
  absl::StatusOr<Exchanged> RunAttempts(uint64_t step, const std::vector<LocalTensor>& tensors,
                                        ExchangeKind exchange, absl::Time deadline,
                                        std::optional<absl::Duration> result_timeout);

  PushPullEngine* const engine_;
  control::MemberSession* const session_;
  BasisStore* const store_;
  MembershipGuard* const membership_;
  const WorkerView worker_;
  std::atomic<uint64_t> retries_{0};
};

// FailedPrecondition when `step` is below this member's admit step (it
// joined again, or late): "worker mN is admitted at step X; step s is below
// it (<why the lease was lost>): ... resume at step X", in the run's
// numbering.
absl::Status CheckAdmitted(const control::MemberSession& session, uint64_t step,
                           const RunSteps& run);

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_EXCHANGE_H_
