// WorkerCore's work off the step path (worker_core.h): the activation
// statistics the training loop submits, checked and handed to the owner
// duties (owner_duties.h), and the follower thread (new epochs end the steps
// of older ones, drain requests, basis proposals synced into the store).
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "worker/daemon/worker_core.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

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
  std::vector<float> copy(d_in * d_in);
  std::memcpy(copy.data(), *gram, bytes);
  owner_.AddActivationFactor(request.tensor_id(), std::move(copy), request.num_samples());
  return absl::OkStatus();
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
