// The node-local route (step_route.h; Policy.hierarchy NODE, node_group.h):
// a chunk this worker leads waits in the group's sum; any other chunk goes
// in FP32 to its leader in the group. Once every member's contribution to
// a led chunk is in, the sum is encoded with the tensor's push codec and
// pushed to the chunk's server as the group's (kNodePush).
//
// A member's failure does not fail the step by itself (see StepPlan::node).
// With data-plane authentication a member's chunk is sealed with its node's
// key (EpochKeys::node) and the leader sums only chunks that verify under
// it; the group's sum leaves sealed with the leader's own key. Not with
// device tensors (Send: Unimplemented).
//
// Ownership: `sender` and `inbox` are not owned and must outlive the route.
// Thread safety: the engine's Run thread only.
#ifndef GIFT_WORKER_ENGINE_NODE_ROUTE_H_
#define GIFT_WORKER_ENGINE_NODE_ROUTE_H_

#include <vector>

#include "common/codec/codec.h"
#include "worker/engine/chunk_sender.h"
#include "worker/engine/node_group.h"
#include "worker/engine/result_inbox.h"
#include "worker/engine/step_route.h"

namespace gift::worker {

class NodeLeaderRoute final : public StepRoute {
 public:
  NodeLeaderRoute(ChunkSender& sender, ResultInbox& inbox, const codec::CodecOptions& options)
      : sender_(sender), inbox_(inbox), codec_options_(options) {}

  // InvalidArgument: no node group, or one without this worker's rank;
  // FailedPrecondition: authentication on and no node key.
  absl::Status Begin(const StepPlan& header) override;
  absl::StatusOr<transport::PeerId> Connect(const StepPlan& plan, const TensorStep& t,
                                            const ChunkRoute& chunk) override;
  absl::Status Send(const RunningStep& step, size_t i, size_t c, const float* x,
                    StepReport& report) override;
  // Files the members' contributions that arrived and pushes the sums of
  // the led chunks whose every contribution is in.
  absl::Status Progress(const RunningStep& step, StepReport& report) override;

 private:
  ChunkSender& sender_;
  ResultInbox& inbox_;
  const codec::CodecOptions codec_options_;
  NodeSums sums_;               // the led chunks' sums
  std::vector<float> scratch_;  // a sum taken, to encode
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_NODE_ROUTE_H_
