// WorkerCore's work off the step path (worker_core.h): the owner duties
// (the steps' statistics handed to the basis owner, the activation
// statistics the training loop submits, run on the owner queue's thread) and
// the follower thread (new epochs end the steps of older ones, drain
// requests, basis proposals synced into the store).
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "worker/daemon/worker_core.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

void WorkerCore::AddOwnedSteps(const gift::v1::ClusterState& before, uint64_t step,
                               const std::vector<LocalTensor>& tensors,
                               std::vector<OwnedTensorStep>* owned) {
  for (const LocalTensor& t : tensors) {
    for (const gift::v1::TensorInfo& info : before.tensors()) {
      if (info.tensor_id() != t.tensor_id) continue;
      bool needs_own = false;
      if (!owner_->WantsStep(before, info, step, &needs_own)) break;
      OwnedTensorStep o{
          .step = step, .tensor_id = t.tensor_id, .name = t.name, .rows = t.rows, .cols = t.cols};
      if (needs_own) {
        if (absl::Status s = ReadTensor(t, options_.device.memory, &o.own); !s.ok()) {
          Log(Level::kWarning, "owner_error",
              {{"tensor", static_cast<int64_t>(t.tensor_id)}, {"error", s.ToString()}});
          break;
        }
      }
      owned->push_back(std::move(o));
    }
  }
}

absl::Status WorkerCore::SubmitActivationStats(
    const gift::v1::SubmitActivationStatsRequest& request) {
  uint64_t d_in = 0;
  {
    // Not the step lock: statistics must not wait behind a step.
    absl::MutexLock lock(&mu_);
    auto it = d_in_by_tensor_.find(request.tensor_id());
    if (it != d_in_by_tensor_.end()) d_in = it->second;
  }
  if (d_in == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor id ", request.tensor_id(), " is not registered"));
  }
  if (request.num_samples() == 0) return absl::InvalidArgumentError("num_samples is 0");
  if (request.gram().location_case() != gift::v1::SharedBuffer::kHandle) {
    return absl::InvalidArgumentError(
        "the Gram matrix must be in a buffer handed over on the buffer socket (a handle)");
  }
  const uint64_t bytes = d_in * d_in * sizeof(float);
  if (request.gram().size_bytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("Gram buffer of ", request.gram().size_bytes(),
                                                   " bytes; d_in ", d_in, " needs ", bytes));
  }
  if (buffer_socket_ == nullptr) {
    return absl::FailedPreconditionError("this worker has no buffer socket");
  }
  auto mapping = buffer_socket_->Find(request.gram().handle());
  if (!mapping.ok()) return mapping.status();
  auto gram = (*mapping)->Range(request.gram().offset_bytes(), bytes, sizeof(float));
  if (!gram.ok()) return gram.status();
  OwnerJob job{.state = session_->state(),
               .tensor_id = request.tensor_id(),
               .num_samples = request.num_samples()};
  job.gram.resize(d_in * d_in);
  std::memcpy(job.gram.data(), *gram, bytes);
  EnqueueOwnerJob(std::move(job));
  return absl::OkStatus();
}

void WorkerCore::EnqueueOwnerJob(OwnerJob job) {
  // Dropped when full: owner_queue_ counts it (Counters::owner_jobs_dropped).
  (void)owner_queue_->Enqueue(std::move(job));
}

void WorkerCore::RunOwnerJob(OwnerJob& job) {
  absl::Status s;
  uint64_t tensor = job.tensor_id;
  if (job.step.has_value()) {
    tensor = job.step->tensor_id;
    // The latest state: a proposal published meanwhile must be seen.
    s = owner_->Observe(*session_->state(), *job.step);
  } else {
    s = owner_->AddActivationFactor(*job.state, job.tensor_id, job.gram, job.num_samples);
  }
  if (!s.ok()) {
    Log(Level::kWarning, "owner_error",
        {{"tensor", static_cast<int64_t>(tensor)}, {"error", s.ToString()}});
  }
  // The latest error ratios, for metrics and the coordinator (heartbeats).
  std::vector<gift::v1::TensorErrorRatio> ratios = owner_->error_ratios();
  session_->SetErrorRatios(ratios);
  absl::MutexLock lock(&mu_);
  error_ratios_ = std::move(ratios);
}

// A step in progress that a peer cannot push ends now, not at its timeout
// (checked on every wake: a step may begin after the state came).
void WorkerCore::CheckStepPeers() {
  if (const uint64_t step = waits_.step(); step != 0) {
    if (absl::Status peers = membership_.Check(*session_->state(), step, session_->member_id());
        !peers.ok()) {
      engine_->AbortStep(peers);
    }
  }
}

void WorkerCore::FollowRevision(const gift::v1::ClusterState& state) {
  engine_->AbortEpochsBefore(state.epoch(),
                             absl::StrCat("the cluster moved to epoch ", state.epoch()));
  const std::string me = session_->member_id();
  for (const gift::v1::Member& w : state.workers()) {
    if (w.member_id() == me && w.state() == gift::v1::MEMBER_STATE_DRAINING &&
        !drain_requested_.HasBeenNotified()) {
      Log(Level::kInfo, "drain_requested", {{"member_id", me}});
      drain_requested_.Notify();
    }
  }
  const absl::Status s = store_.Sync(state);
  if (!s.ok() && s.ToString() != last_sync_error_.ToString()) {
    Log(Level::kWarning, "basis_sync_failed", {{"error", s.ToString()}});
  }
  last_sync_error_ = s;
}

}  // namespace gift::worker
