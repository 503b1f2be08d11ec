#include "common/control/state_follower.h"

#include <utility>

namespace gift::control {

StateFollower::StateFollower(const MemberSession* session, absl::Duration tick, Callbacks callbacks)
    : session_(session), tick_(tick), callbacks_(std::move(callbacks)) {
  thread_ = std::thread([this] { Loop(); });
}

StateFollower::~StateFollower() { Stop(); }

void StateFollower::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void StateFollower::Loop() {
  uint64_t seen = 0;
  while (!stop_.HasBeenNotified()) {
    const absl::Time woke_by = absl::Now() + tick_;
    auto state = session_->WaitForRevision(seen + 1, tick_);
    if (callbacks_.on_wake) callbacks_.on_wake();
    if (!state.ok()) {
      // A timeout re-checks stop; a closed session returns at once, so wait
      // out the tick instead of spinning.
      if (state.status().code() != absl::StatusCode::kDeadlineExceeded) {
        stop_.WaitForNotificationWithDeadline(woke_by);
      }
      continue;
    }
    seen = (*state)->revision();
    if (callbacks_.on_revision) callbacks_.on_revision(**state);
  }
}

}  // namespace gift::control
