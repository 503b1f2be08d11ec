// The direct route (step_route.h): each chunk encoded with its tensor's
// push codec and pushed to the chunk's server (ChunkRoute::server).
//
// Ownership: `sender` is not owned and must outlive the route. Thread
// safety: the engine's Run thread only.
#ifndef GIFT_WORKER_ENGINE_SERVER_ROUTE_H_
#define GIFT_WORKER_ENGINE_SERVER_ROUTE_H_

#include "worker/engine/chunk_sender.h"
#include "worker/engine/step_route.h"

namespace gift::worker {

class ServerRoute final : public StepRoute {
 public:
  explicit ServerRoute(ChunkSender& sender) : sender_(sender) {}

  absl::Status Begin(const StepPlan& header) override;
  absl::StatusOr<transport::PeerId> Connect(const StepPlan& plan, const TensorStep& t,
                                            const ChunkRoute& chunk) override;
  absl::Status Send(const RunningStep& step, size_t i, size_t c, const float* x,
                    StepReport& report) override;
  absl::Status Progress(const RunningStep&, StepReport&) override { return absl::OkStatus(); }

 private:
  ChunkSender& sender_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_SERVER_ROUTE_H_
