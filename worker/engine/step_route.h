// Where a step's chunks go, behind one interface, the way a comm hook sits
// outside the process group: ServerRoute pushes each chunk to its server
// (server_route.h); NodeLeaderRoute sends it to its leader in the node
// group, which pushes the group's sum (node_route.h). The push-pull engine
// (push_pull_engine.h) runs a step through the route its plan asks for
// (StepPlan::node) and knows nothing of either.
//
//   route.Begin(header);                                 // the step opens
//   peer[i][c] = route.Connect(plan, t_i, t_i.chunks[c]); // before any send
//   route.Send(step, i, c, x, report);  // each chunk, once its rows are ready
//   route.Progress(step, report);       // after arrivals, after each Add
//
// Thread safety: the engine's Run thread only.
#ifndef GIFT_WORKER_ENGINE_STEP_ROUTE_H_
#define GIFT_WORKER_ENGINE_STEP_ROUTE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transport/transport.h"
#include "worker/engine/step_plan.h"

namespace gift::worker {

class TensorBuffers;

// The step being run, as the engine holds it (Run thread): the plan and
// its tensors added so far, and for each tensor (by position in
// plan.tensors) its buffers and the connection of each chunk (Connect's).
struct RunningStep {
  const StepPlan& plan;
  uint64_t run = 0;  // the engine's run counter (ResultInbox::Open)
  const std::vector<TensorBuffers*>& buffers;
  const std::vector<std::vector<transport::PeerId>>& peers;
};

class StepRoute {
 public:
  virtual ~StepRoute() = default;
  // The step of `header` (no tensors) opens. Errors refuse the step.
  virtual absl::Status Begin(const StepPlan& header) = 0;
  // The connection chunk `chunk` of `t` leaves through.
  virtual absl::StatusOr<transport::PeerId> Connect(const StepPlan& plan, const TensorStep& t,
                                                    const ChunkRoute& chunk) = 0;
  // Sends chunk `c` of the step's tensor `i`. `x` is what its stage's
  // Prepare returned (host rows, or null for a device tensor).
  virtual absl::Status Send(const RunningStep& step, size_t i, size_t c, const float* x,
                            StepReport& report) = 0;
  // Sends what became ready meanwhile (after arrivals were decoded, and at
  // the end of each Add).
  virtual absl::Status Progress(const RunningStep& step, StepReport& report) = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_STEP_ROUTE_H_
