// The follower thread of a member daemon (a worker, an aggregator shard):
// waits on the member session for each new revision of the cluster state
// and hands it to `on_revision`; calls `on_wake` after every wait, which
// returns at least every `tick`, so a caller can check its own clocks (a
// watchdog's heartbeat, a step that a lost peer can no longer finish).
//
//   control::StateFollower follower(session, absl::Milliseconds(200),
//       {.on_wake = [&] { ... }, .on_revision = [&](const auto& s) { ... }});
//   ...
//   follower.Stop();   // or its destructor
//
// Revisions that arrive while on_revision runs are coalesced: the next call
// gets the newest. While the session is closed (no state can come any more)
// the thread still wakes every `tick` without spinning.
//
// Ownership: the session must outlive the follower. Thread safety: the
// callbacks run on the follower's thread only; Stop may be called from any
// thread but not from a callback.
#ifndef GIFT_COMMON_CONTROL_STATE_FOLLOWER_H_
#define GIFT_COMMON_CONTROL_STATE_FOLLOWER_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "gift/v1/cluster.pb.h"

namespace gift::control {

class StateFollower {
 public:
  struct Callbacks {
    std::function<void()> on_wake;  // may be empty
    std::function<void(const gift::v1::ClusterState&)> on_revision;
  };

  // Starts the thread.
  StateFollower(const MemberSession* session, absl::Duration tick, Callbacks callbacks);
  ~StateFollower();  // Stop()
  StateFollower(const StateFollower&) = delete;
  StateFollower& operator=(const StateFollower&) = delete;

  // Stops the thread after its current wait or callback; idempotent.
  void Stop();

 private:
  void Loop();

  const MemberSession* const session_;
  const absl::Duration tick_;
  const Callbacks callbacks_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_STATE_FOLLOWER_H_
