#include "worker/daemon/step_exchange.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/codec/codec_spec.h"
#include "worker/daemon/step_retry.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

StepExchange::StepExchange(PushPullEngine* engine, control::MemberSession* session,
                           BasisStore* store, MembershipGuard* membership, WorkerView worker)
    : engine_(engine),
      session_(session),
      store_(store),
      membership_(membership),
      worker_(std::move(worker)) {}

bool StepExchange::Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kUnavailable;
}

void Exchanged::AddVersions(absl::Span<const TensorStep> tensors) {
  for (const TensorStep& t : tensors)
    versions.emplace_back(t.basis_version, t.transform != nullptr);
}

absl::StatusOr<StepPlan> StepExchange::Plan(const gift::v1::ClusterState& state, uint64_t step,
                                            const std::vector<LocalTensor>& tensors) {
  const BasisLookup lookup = [this](uint64_t tensor, uint64_t version) {
    return store_->Get(tensor, version);
  };
  auto plan = PlanStep(state, session_->member_id(), step, tensors, lookup);
  if (!plan.ok()) return plan;
  plan->keys = session_->chunk_keys(plan->epoch);
  // A node group's member seals its chunks with the node key, which it
  // fetches once a state puts it in the group; that fetch may have failed
  // or not run (a re-joined worker's first state in the group came before
  // its Watch stream was open again): fetch now, else wait for it. A
  // server's key missing (its results would be refused) is fetched now too,
  // but the step goes on without it.
  auto missing = [&] {
    return session_->dataplane_auth() &&
           (plan->keys == nullptr || (plan->node != nullptr && !plan->keys->node.has_value()));
  };
  if (missing() || session_->keys_missing()) {
    session_->FetchMissingKeys();
    plan->keys = session_->chunk_keys(plan->epoch);
  }
  if (missing()) {
    return absl::FailedPreconditionError(absl::StrCat("no data-plane keys of epoch ", plan->epoch,
                                                      plan->keys == nullptr ? "" : " (node key)",
                                                      " yet"));
  }
  return plan;
}

absl::StatusOr<Exchanged> StepExchange::Run(uint64_t step, const std::vector<LocalTensor>& tensors,
                                            ExchangeKind exchange, absl::Time deadline,
                                            std::optional<absl::Duration> result_timeout) {
  absl::StatusOr<Exchanged> done = RunAttempts(step, tensors, exchange, deadline, result_timeout);
  if (done.ok() || exchange == ExchangeKind::kGradients) return done;
  // The data path names the step by its key (step_key.h): say which step
  // and which of its exchanges.
  absl::Status named(done.status().code(),
                     absl::StrCat(ExchangeName(exchange), " of step ", step, " (key ",
                                  StepKey(step, exchange), "): ", done.status().message()));
  done.status().ForEachPayload([&named](absl::string_view url, const absl::Cord& payload) {
    named.SetPayload(url, payload);
  });
  return named;
}

absl::StatusOr<Exchanged> StepExchange::RunAttempts(uint64_t step,
                                                    const std::vector<LocalTensor>& tensors,
                                                    ExchangeKind exchange, absl::Time deadline,
                                                    std::optional<absl::Duration> result_timeout) {
  int same_epoch_retries = 0;
  absl::Status unreachable;  // the last plan that could not reach the coordinator
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("step ", step, " did not complete within the step timeout",
                       unreachable.ok() ? "" : "; last: ", unreachable.message()));
    }
    // Re-joined during the step (its lease was lost): not at this step.
    const RunSteps run = worker_.run();
    if (absl::Status admitted = CheckAdmitted(*session_, step, run); !admitted.ok()) {
      return admitted;
    }
    std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
    membership_->Observe(state);
    if (absl::Status current = run.CheckCurrent(*state); !current.ok()) return current;
    // A peer that cannot push, or one lost under on_member_loss fail.
    if (absl::Status peers = membership_->Check(*state, step, session_->member_id()); !peers.ok()) {
      return peers;
    }
    // Not plannable yet (or no data-plane keys of the epoch yet): wait.
    auto plan = Plan(*state, step, tensors);
    if (absl::IsUnavailable(plan.status())) {
      // A basis fetch that found the coordinator down for a moment (a
      // restart): tried again within the step's time, as the other ranks
      // wait for this one.
      if (unreachable.ok()) {
        Log(Level::kWarning, "step_plan_retry",
            {{"step", static_cast<int64_t>(step)}, {"error", plan.status().ToString()}});
      }
      unreachable = plan.status();
      absl::SleepFor(std::min(left, absl::Milliseconds(100)));
      continue;
    }
    if (!plan.ok()) {
      if (plan.status().code() != absl::StatusCode::kFailedPrecondition) return plan.status();
      if (step > state->frozen_through_step()) {
        // The schedule is frozen through (the furthest reported step +
        // window). A worker that starts or resumes at a later step (a
        // checkpoint, a loop that skips steps) reports that it is at step - 1,
        // which moves the horizon past the step; pending proposals are then
        // postponed above it, so no step sees two versions.
        uint64_t at = step - 1;
        if (const std::optional<uint64_t> last = worker_.last_step(); last.has_value()) {
          at = std::max(at, *last);
        }
        session_->SetLastStep(at);
        (void)session_->HeartbeatNow();
      }
      (void)session_->WaitForRevision(state->revision() + 1,
                                      std::min(left, absl::Milliseconds(500)));
      continue;
    }
    if (exchange != ExchangeKind::kGradients) {
      plan->step = StepKey(step, exchange);
      for (TensorStep& t : plan->tensors) {
        // The exact measurement in FP32; the per-worker sketches keep the
        // push codec planned for their statistics tensor, the policy's
        // transform.statistics_codec (policy ResolveTensorSettings), which
        // the servers pull in too.
        if (exchange == ExchangeKind::kExactMeasure) {
          t.push_spec = codec::CodecSpec{.format = codec::Format::kF32,
                                         .scaling = codec::Scaling::kNone};
        }
        t.transform = nullptr;
        t.basis_version = 0;
        t.error_feedback = false;  // FP32 has no rounding error to feed back
      }
    }
    plan->result_timeout = result_timeout;
    const uint64_t stalled_before = engine_->stalled_send_arenas_renewed();
    auto report = engine_->Run(*plan);
    if (const uint64_t stalled = engine_->stalled_send_arenas_renewed() - stalled_before;
        stalled > 0) {
      Log(Level::kWarning, "stalled_push_left_behind",
          {{"step", static_cast<int64_t>(step)},
           {"epoch", static_cast<int64_t>(plan->epoch)},
           {"tensors", static_cast<int64_t>(stalled)},
           {"why",
            "a push of the attempt before was still in flight to a server this epoch no "
            "longer uses; the tensor encodes into a fresh send buffer"}});
    }
    if (report.ok()) {
      Exchanged done{.report = *report, .epoch = plan->epoch, .world_size = plan->world_size};
      done.AddVersions(plan->tensors);
      return done;
    }
    if (!Retryable(report.status())) return report.status();
    CountRetry();
    Log(Level::kWarning, "step_retry",
        {{"step", static_cast<int64_t>(step)},
         {"epoch", static_cast<int64_t>(plan->epoch)},
         {"reason", report.status().ToString()}});
    // Run it again at once when that is exact-once and may help (step_retry.h),
    // else once the cluster has moved to a new epoch.
    if (same_epoch_retries < kMaxSameEpochRetries &&
        RetryUnderSameEpoch(report.status(), *session_->state())) {
      ++same_epoch_retries;
      continue;
    }
    WaitForEpochAfter(plan->epoch, deadline);
  }
}

void StepExchange::WaitForEpochAfter(uint64_t ended, absl::Time deadline) {
  (void)session_->WaitFor([ended](const gift::v1::ClusterState& s) { return s.epoch() > ended; },
                          std::max(absl::ZeroDuration(), deadline - absl::Now()));
}

absl::Status CheckAdmitted(const control::MemberSession& session, uint64_t step,
                           const RunSteps& run) {
  const control::MemberIdentity me = session.identity();
  if (step >= me.admit_step) return absl::OkStatus();
  // In the run's numbering (the admit step is above the run's base: a run
  // starts above every step begun).
  const absl::Status lost = session.lease_lost();
  return absl::FailedPreconditionError(absl::StrCat(
      "worker ", me.member_id, " is admitted at step ", run.ToRun(me.admit_step), "; step ",
      run.ToRun(step), " is below it", lost.ok() ? "" : absl::StrCat(" (", lost.message(), ")"),
      ": resynchronise the parameters (docs/operations.md, Rejoining) and resume at step ",
      run.ToRun(me.admit_step)));
}

}  // namespace gift::worker
