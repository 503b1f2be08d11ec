#include "bench/simulated_members.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::bench {

namespace v1 = ::gift::v1;

void FanoutTracker::Observe(int index, const v1::ClusterState& state) {
  absl::MutexLock lock(&mu_);
  if (latest_ == nullptr || state.revision() > latest_->revision()) {
    latest_ = std::make_shared<const v1::ClusterState>(state);
  }
  if (target_ && !seen_[index] && target_(state)) {
    seen_[index] = true;
    if (--remaining_ == 0) done_at_ = absl::Now();
  }
}

void FanoutTracker::Arm(std::function<bool(const v1::ClusterState&)> target) {
  absl::MutexLock lock(&mu_);
  target_ = std::move(target);
  std::fill(seen_.begin(), seen_.end(), false);
  remaining_ = static_cast<int>(seen_.size());
}

absl::StatusOr<absl::Time> FanoutTracker::WaitAll(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return remaining_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(remaining_, " of ", seen_.size(),
                                                    " watchers did not see the change within ",
                                                    absl::FormatDuration(timeout)));
  }
  target_ = nullptr;
  return done_at_;
}

std::shared_ptr<const v1::ClusterState> FanoutTracker::latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

WatchStream::WatchStream(v1::Coordinator::Stub* stub, const std::string& member_id, int index,
                         FanoutTracker* tracker)
    : index_(index), tracker_(tracker) {
  request_.set_member_id(member_id);
  stub->async()->Watch(&context_, &request_, this);
  StartRead(&state_);
  StartCall();
}

void WatchStream::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  tracker_->Observe(index_, state_);
  StartRead(&state_);
}

void WatchStream::OnDone(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  status_ = status;
  done_ = true;
}

void WatchStream::Stop() {
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

Stepper::Stepper(std::vector<SimMember>* members, FanoutTracker* tracker, absl::Duration step,
                 absl::Duration rpc_timeout)
    : members_(members),
      tracker_(tracker),
      step_(step),
      rpc_timeout_(rpc_timeout),
      thread_([this] { Loop(); }) {}

Stepper::~Stepper() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

uint64_t Stepper::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

void Stepper::Loop() {
  struct Call {
    grpc::ClientContext context;
    v1::HeartbeatRequest request;
    v1::HeartbeatResponse response;
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), step_);
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
      mu_.Await(absl::Condition(&idle));
      if (stopping_) return;
      in_flight_ = static_cast<int>(members_->size());
    }
    const std::shared_ptr<const v1::ClusterState> state = tracker_->latest();
    const uint64_t frozen = state == nullptr ? 0 : state->frozen_through_step();
    const uint64_t epoch = state == nullptr ? 0 : state->epoch();
    for (SimMember& m : *members_) {
      m.last_step = std::min(m.last_step + 1, std::max(frozen, m.last_step));
      auto* call = new Call;
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
      call->request.set_member_id(m.id);
      call->request.set_epoch(epoch);
      call->request.set_last_step(m.last_step);
      m.client->stub().async()->Heartbeat(&call->context, &call->request, &call->response,
                                          [this, call](grpc::Status status) {
                                            delete call;
                                            absl::MutexLock lock(&mu_);
                                            if (!status.ok()) ++failures_;
                                            --in_flight_;
                                          });
    }
  }
}

}  // namespace gift::bench
