// WorkerCore's steps started early (StartTensors, worker_core.h): the
// open step, its tensors pushed as they come, and its completion by the
// step's PushPull.
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "worker/daemon/step_retry.h"
#include "worker/daemon/worker_core.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

absl::Status WorkerCore::StartTensors(const gift::v1::StartTensorsRequest& run_request) {
  // The run's step, in the cluster's numbering from here on (run_steps.h).
  absl::StatusOr<uint64_t> step = admission_.Admit(run_request.step());
  if (!step.ok()) return step.status();
  gift::v1::StartTensorsRequest request = run_request;
  request.set_step(*step);
  absl::MutexLock step_lock(&step_mu_);
  if (open_.has_value() && open_->step != request.step()) {
    if (request.step() < open_->step) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", request.step(), " is below the open step ", open_->step));
    }
    AbandonOpenStep(absl::StrCat("step ", request.step(), " started"));
  }
  auto selected = Select(request.tensor_ids());
  if (!selected.ok()) return selected.status();
  absl::flat_hash_set<uint64_t> started;
  if (open_.has_value()) {
    for (const RegisteredTensor* r : open_->selected) started.insert(r->local.tensor_id);
  }
  std::vector<const RegisteredTensor*> more;
  for (const RegisteredTensor* r : *selected) {
    if (!started.insert(r->local.tensor_id).second) {
      if (request.tensor_ids().empty()) continue;  // "every tensor not started yet"
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor id ", r->local.tensor_id, " was already started in step ", request.step()));
    }
    more.push_back(r);
  }
  if (!open_.has_value()) {
    const absl::Time deadline = absl::Now() + options_.step_timeout;
    if (auto s = admission_.AwaitStartBarrier(request.step(), deadline); !s.ok()) return s;
    OpenStep o;
    o.step = request.step();
    o.start = std::chrono::steady_clock::now();
    o.deadline = deadline;
    o.before = session_->state();
    o.retries_before = exchange_.retries();
    admission_.SetOpen(true);
    open_ = std::move(o);
  }
  if (absl::Status s = AddToOpenStep(more); !s.ok()) {
    AbandonOpenStep(s.message());
    return s;
  }
  return absl::OkStatus();
}

absl::Status WorkerCore::AddToOpenStep(const std::vector<const RegisteredTensor*>& more) {
  if (more.empty()) return absl::OkStatus();
  OpenStep& o = *open_;
  std::vector<LocalTensor> tensors;
  for (const RegisteredTensor* r : more) {
    // 16-bit buffers: into the FP32 staging, once per step
    if (absl::Status s = r->Widen(); !s.ok()) return s;
    tensors.push_back(r->local);
    o.selected.push_back(r);
    o.tensors.push_back(r->local);
  }
  owner_.AddWanted(*o.before, o.step, tensors, &o.owned);
  if (!o.failed.ok()) return absl::OkStatus();  // PushPull runs the whole step again
  const std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
  membership_.Observe(state);
  auto plan = exchange_.Plan(*state, o.step, tensors);
  absl::Status s = plan.status();
  if (s.ok() && !o.begun) {
    s = engine_->Begin(StepHeader(*plan));
    o.begun = s.ok();
    o.exchanged.epoch = plan->epoch;
    o.exchanged.world_size = plan->world_size;
  } else if (s.ok() && plan->epoch != o.exchanged.epoch) {
    s = absl::AbortedError(absl::StrCat("step ", o.step, ": the cluster moved from epoch ",
                                        o.exchanged.epoch, " to ", plan->epoch,
                                        " during the step"));
  }
  if (s.ok()) s = engine_->Add(plan->tensors);
  if (s.ok()) {
    o.exchanged.AddVersions(plan->tensors);
    return absl::OkStatus();
  }
  o.failed = s;
  engine_->Cancel();
  return absl::OkStatus();
}

absl::StatusOr<gift::v1::PushPullResponse> WorkerCore::FinishOpenStep(
    const gift::v1::PushPullRequest& request) {
  if (request.measure_error()) {
    AbandonOpenStep("its PushPull asked to measure errors");
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", request.step(), " was started with StartTensors, so it cannot measure errors"));
  }
  auto selected = Select(request.tensor_ids());
  if (!selected.ok()) {
    AbandonOpenStep("its PushPull named unknown tensors");
    return selected.status();
  }
  absl::flat_hash_set<uint64_t> started;
  for (const RegisteredTensor* r : open_->selected) started.insert(r->local.tensor_id);
  std::vector<const RegisteredTensor*> more;
  for (const RegisteredTensor* r : *selected) {
    if (started.insert(r->local.tensor_id).second) more.push_back(r);
  }
  if (absl::Status s = AddToOpenStep(more); !s.ok()) {
    AbandonOpenStep(s.message());
    return s;
  }
  // This worker's sketches, from its gradients (the engine writes the
  // averages into them only in Finish).
  sketches_.Prepare(*open_->before, open_->step, open_->tensors);
  absl::Status s = open_->failed;
  if (s.ok()) {
    auto finished = engine_->Finish();
    if (finished.ok()) {
      open_->exchanged.report = *finished;
    } else {
      s = finished.status();
    }
  }
  OpenStep o = *std::move(open_);
  open_.reset();
  admission_.SetOpen(false);
  if (!s.ok()) {
    // FailedPrecondition: the state could not plan the step yet (Exchange
    // waits for one that can).
    if (!StepExchange::Retryable(s) && s.code() != absl::StatusCode::kFailedPrecondition) return s;
    Log(Level::kWarning, "early_push_fallback",
        {{"step", static_cast<int64_t>(o.step)}, {"reason", s.ToString()}});
    if (o.begun && !RetryUnderSameEpoch(s, *session_->state())) {
      // Some chunks went out under the open step's epoch: servers count a
      // rank once per epoch, so the step runs again once the cluster left
      // that epoch.
      exchange_.CountRetry();
      exchange_.WaitForEpochAfter(o.exchanged.epoch, o.deadline);
    }
    auto again = exchange_.Run(o.step, o.tensors, ExchangeKind::kGradients, o.deadline);
    if (!again.ok()) return again.status();
    o.exchanged = *std::move(again);
  }
  Completed c;
  static_cast<StepState&>(c) = std::move(o);
  c.sketches = sketches_.Exchange(c.step, o.deadline);
  return CompleteStep(std::move(c));
}

void WorkerCore::AbandonOpenStep(absl::string_view why) {
  Log(Level::kWarning, "open_step_abandoned",
      {{"step", static_cast<int64_t>(open_->step)}, {"reason", std::string(why)}});
  engine_->Cancel();
  open_.reset();
  admission_.SetOpen(false);
}

}  // namespace gift::worker
