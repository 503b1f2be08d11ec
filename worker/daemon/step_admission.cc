#include "worker/daemon/step_admission.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "worker/daemon/step_exchange.h"
#include "worker/daemon/training_client_watch.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

absl::StatusOr<uint64_t> StepAdmission::Admit(uint64_t run_step) const {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("the worker is draining; no new steps");
  // The run's step in the cluster's numbering (run_steps.h), which stays
  // within kMaxTrainingStep.
  const uint64_t most = kMaxTrainingStep - std::min(run_.run().base_step(), kMaxTrainingStep);
  if (run_step > most) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", run_step, " is too large (at most ", most, ")"));
  }
  const uint64_t step = run_.ToCluster(run_step);
  if (last_step_.has_value() && step <= *last_step_) {
    const std::string connected = ConnectedRunClients(*session_->state());
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", run_.ToRun(step), " is not above the last step ", run_.ToRun(*last_step_),
        run_.Describe().empty() ? "" : absl::StrCat(" of ", run_.Describe()),
        "; a new run of the job (from step 0) begins when it registers its buffers after "
        "every client of this run has disconnected (connected now, this one among them: ",
        connected.empty() ? "none the workers can watch" : connected,
        "), or with a new run id (WorkerClient run_id / GIFT_RUN_ID), or after "
        "`giftctl run reset`"));
  }
  if (absl::Status admitted = CheckAdmitted(*session_, step, run_); !admitted.ok()) return admitted;
  return step;
}

absl::Status StepAdmission::AwaitStartBarrier(uint64_t step, absl::Time deadline) const {
  const bool first = !last_step().has_value();
  // A worker admitted at a later step joined a cluster that already runs
  // (a restarted daemon): the barrier is the starting cluster's, not its.
  if (!first || min_workers_ <= 1 || session_->identity().admit_step > 0) {
    return absl::OkStatus();
  }
  const uint32_t want = min_workers_;
  const int joined = session_->state()->workers_size();
  if (static_cast<uint32_t>(joined) < want) {
    Log(Level::kInfo, "start_barrier_waiting",
        {{"step", step}, {"workers", joined}, {"min_workers", want}});
  }
  auto ready = session_->WaitFor(
      [want](const gift::v1::ClusterState& s) {
        return static_cast<uint32_t>(s.workers_size()) >= want;
      },
      deadline - absl::Now());
  if (!ready.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("the first step waits for ", want, " workers; ",
                                                    session_->state()->workers_size(),
                                                    " joined within the step timeout"));
  }
  return absl::OkStatus();
}

void StepAdmission::SetRun(RunSteps run) {
  absl::MutexLock lock(&mu_);
  run_ = std::move(run);
}

RunSteps StepAdmission::run() const {
  absl::MutexLock lock(&mu_);
  return run_;
}

void StepAdmission::Completed(uint64_t step) {
  absl::MutexLock lock(&mu_);
  last_step_ = step;
}

std::optional<uint64_t> StepAdmission::last_step() const {
  absl::MutexLock lock(&mu_);
  return last_step_;
}

StepAdmission::InFlight StepAdmission::BeginStep() {
  absl::MutexLock lock(&mu_);
  in_step_ = true;
  return InFlight(this);
}

StepAdmission::InFlight::~InFlight() {
  absl::MutexLock lock(&admission_->mu_);
  admission_->in_step_ = false;
}

void StepAdmission::SetOpen(bool open) {
  absl::MutexLock lock(&mu_);
  step_open_ = open;
}

bool StepAdmission::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !in_step_ && !step_open_; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

}  // namespace gift::worker
