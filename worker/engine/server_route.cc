#include "worker/engine/server_route.h"

#include "worker/engine/tensor_buffers.h"

namespace gift::worker {

absl::Status ServerRoute::Begin(const StepPlan& header) {
  if (header.node != nullptr) {
    return absl::InvalidArgumentError("a node group's step goes through the node route");
  }
  return absl::OkStatus();
}

absl::StatusOr<transport::PeerId> ServerRoute::Connect(const StepPlan&, const TensorStep&,
                                                       const ChunkRoute& chunk) {
  return sender_.ConnectToServer(chunk.server);
}

absl::Status ServerRoute::Send(const RunningStep& step, size_t i, size_t c, const float*,
                               StepReport& report) {
  TensorBuffers& buffers = *step.buffers[i];
  return sender_.PushChunk(step.plan, step.plan.tensors[i], buffers.stage(), buffers.chunks()[c],
                           step.peers[i][c], step.run, report);
}

}  // namespace gift::worker
