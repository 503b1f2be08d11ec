// Turns the coordinator's cluster state into the data-plane plan of one step
// for this worker (worker/engine/step_plan.h StepPlan): the epoch, this
// member's rank and the world (and a fingerprint of its workers), and for
// every local tensor its push codec (resolved by policy::
// ResolveTensorSettings in dataplane::StateViewOf, the view the servers
// build their shard epoch from), the basis version active at the step
// (cluster.proto: the committed version with the largest activation step <=
// step), its transform, its chunks with the aggregator address of each, and
// whether its push uses error feedback (the policy's error_feedback after the
// tensor's overrides, the same resolution), and, under the policy's
// hierarchy NODE, this worker's node group (node_group.h NodeGroupOf).
//
// Thread safety: pure functions.
#ifndef GIFT_WORKER_PLAN_STEP_PLANNER_H_
#define GIFT_WORKER_PLAN_STEP_PLANNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/transform/gradient_transform.h"
#include "gift/v1/cluster.pb.h"
#include "worker/engine/step_plan.h"
#include "worker/intake/local_tensor.h"

namespace gift::worker {

// The transform of (tensor id, basis version); never called for direct
// versions. May block (a fetch from the coordinator).
using BasisLookup =
    std::function<absl::StatusOr<std::shared_ptr<const transform::GradientTransform>>(
        uint64_t tensor_id, uint64_t version)>;

// The entry of `state` for a tensor, or null.
const gift::v1::TensorBasisState* FindBasisState(const gift::v1::ClusterState& state,
                                                 uint64_t tensor_id);

// The committed version of `basis` active at `step`, or null when none is
// (version 0, direct, is implied before the first one).
const gift::v1::BasisVersion* ActiveVersion(const gift::v1::TensorBasisState& basis, uint64_t step);

// StepPlan::worker_set of `state`: a hash of its workers' (rank, member id)
// pairs, equal for states with the same workers in any order. Stable within
// a process only (absl::Hash).
uint64_t WorkerSetOf(const gift::v1::ClusterState& state);

// The plan of `step` for `member_id`. Errors:
//   FailedPrecondition: the state cannot carry the step yet, and a later
//     state may (this member is not among its workers, the shard map is of
//     another epoch, a tensor has no chunks yet, a chunk's server is
//     missing, or the step is above frozen_through_step). Wait for the next
//     revision and plan again.
//   InvalidArgument: the state contradicts the local tensors (a shape
//     differs from the registered one) or itself.
//   Errors of `lookup`.
absl::StatusOr<StepPlan> PlanStep(const gift::v1::ClusterState& state, absl::string_view member_id,
                                  uint64_t step, const std::vector<LocalTensor>& tensors,
                                  const BasisLookup& lookup);

}  // namespace gift::worker

#endif  // GIFT_WORKER_PLAN_STEP_PLANNER_H_
