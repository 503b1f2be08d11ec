// Simulated members of `gift-bench control-plane`: each holds a Watch stream
// on a real gift-coordinator and heartbeats its step, as a worker's member
// session does, so the bench can measure how fast a change reaches every
// member (FanoutTracker) and what the members cost the coordinator.
//
// Thread safety: FanoutTracker is thread-safe (Observe runs on gRPC's
// callback threads). A WatchStream is driven by gRPC; Stop from one thread.
// A Stepper owns its thread and touches the members' last_step only there.
#ifndef GIFT_BENCH_SIMULATED_MEMBERS_H_
#define GIFT_BENCH_SIMULATED_MEMBERS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control/coordinator_client.h"
#include "gift/v1/coordinator.grpc.pb.h"

namespace gift::bench {

// Counts the members whose Watch has delivered a state satisfying the armed
// target, and keeps the newest state any member has seen. Arm before the
// change that produces the target state, so no member can have seen it yet.
class FanoutTracker {
 public:
  explicit FanoutTracker(int members) : seen_(members, false) {}

  // Called on gRPC's callback threads with each state member `index` reads.
  void Observe(int index, const gift::v1::ClusterState& state);
  void Arm(std::function<bool(const gift::v1::ClusterState&)> target);
  // The time the last member saw the target; DeadlineExceeded naming how
  // many did not.
  absl::StatusOr<absl::Time> WaitAll(absl::Duration timeout);
  std::shared_ptr<const gift::v1::ClusterState> latest() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<bool> seen_ ABSL_GUARDED_BY(mu_);
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time done_at_ ABSL_GUARDED_BY(mu_);
  std::function<bool(const gift::v1::ClusterState&)> target_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const gift::v1::ClusterState> latest_ ABSL_GUARDED_BY(mu_);
};

// One member's Watch stream on the callback API; every state read goes to
// the tracker. `stub` and `tracker` must outlive the stream.
class WatchStream final : public grpc::ClientReadReactor<gift::v1::ClusterState> {
 public:
  WatchStream(gift::v1::Coordinator::Stub* stub, const std::string& member_id, int index,
              FanoutTracker* tracker);

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  // Cancels the stream and waits until gRPC is done with it.
  void Stop();

 private:
  const int index_;
  FanoutTracker* const tracker_;
  grpc::ClientContext context_;
  gift::v1::WatchRequest request_;
  gift::v1::ClusterState state_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

struct SimMember {
  std::string id;
  const control::CoordinatorClient* client = nullptr;  // of the member's channel
  uint64_t last_step = 0;                              // touched by the Stepper only
  std::unique_ptr<WatchStream> watch;
};

// Every `step`, one Heartbeat per member (async, callback API, each with
// `rpc_timeout`) carrying its next step, capped at the frozen schedule of the
// tracker's latest state; a round waits for the previous one, so a slow
// coordinator slows the steps down rather than piling up calls. `members`
// and `tracker` must outlive the Stepper; the destructor joins its thread.
class Stepper {
 public:
  Stepper(std::vector<SimMember>* members, FanoutTracker* tracker, absl::Duration step,
          absl::Duration rpc_timeout);
  ~Stepper();

  // Heartbeats that failed so far.
  uint64_t failures() const;

 private:
  void Loop();

  std::vector<SimMember>* const members_;
  FanoutTracker* const tracker_;
  const absl::Duration step_;
  const absl::Duration rpc_timeout_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_SIMULATED_MEMBERS_H_
