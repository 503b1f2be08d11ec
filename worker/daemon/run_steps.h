// The training run a worker's buffers belong to (cluster.proto RunState),
// and its step numbering: the training loop's step s is the cluster's step
// base_step + s, so a job that starts again from step 0 in a new run finds
// every cluster step above the old run's (servers, schedules and bases only
// ever see steps grow). Run "" of base 0 (a cluster that never named a run)
// numbers steps as they are.
//
// A value; thread-compatible.
#ifndef GIFT_WORKER_DAEMON_RUN_STEPS_H_
#define GIFT_WORKER_DAEMON_RUN_STEPS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gift/v1/cluster.pb.h"

namespace gift::worker {

class RunSteps {
 public:
  RunSteps() = default;
  explicit RunSteps(gift::v1::RunState run) : run_(std::move(run)) {}

  const gift::v1::RunState& run() const { return run_; }
  uint64_t ToCluster(uint64_t run_step) const { return run_.base_step() + run_step; }
  uint64_t ToRun(uint64_t cluster_step) const {
    return cluster_step >= run_.base_step() ? cluster_step - run_.base_step() : 0;
  }

  // "run 'r2' (generation 2, its step 0 is cluster step 57)"; "" for run ""
  // of base 0 (nothing to say).
  std::string Describe() const {
    if (run_.run_id().empty() && run_.base_step() == 0) return "";
    return absl::StrCat("run '", run_.run_id(), "' (generation ", run_.generation(),
                        ", its step 0 is cluster step ", run_.base_step(), ")");
  }

  // FailedPrecondition when `state` is in a later run than this one: the
  // registration belongs to a run that ended.
  absl::Status CheckCurrent(const gift::v1::ClusterState& state) const {
    if (state.run().generation() == run_.generation()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("a new run began (run '", state.run().run_id(), "', generation ",
                     state.run().generation(), "): these buffers were registered in run '",
                     run_.run_id(), "' (generation ", run_.generation(), "); register them again"));
  }

 private:
  gift::v1::RunState run_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_RUN_STEPS_H_
