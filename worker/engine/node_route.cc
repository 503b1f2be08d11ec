#include "worker/engine/node_route.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dataplane/chunk_mac.h"
#include "worker/engine/step_failure.h"
#include "worker/engine/tensor_buffers.h"

namespace gift::worker {

absl::Status NodeLeaderRoute::Begin(const StepPlan& header) {
  if (header.node == nullptr) return absl::InvalidArgumentError("the step has no node group");
  if (header.keys != nullptr && !header.keys->node.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node-local aggregation with data-plane authentication needs this worker's node key of "
        "epoch ",
        header.epoch, ", and the coordinator has not handed it over (yet)"));
  }
  const NodeGroup& group = *header.node;
  if (group.self != header.rank ||
      !std::binary_search(group.ranks.begin(), group.ranks.end(), header.rank)) {
    return absl::InvalidArgumentError("the node group does not hold this worker's rank");
  }
  sums_.Reset(header.node);
  return absl::OkStatus();
}

absl::StatusOr<transport::PeerId> NodeLeaderRoute::Connect(const StepPlan& plan,
                                                           const TensorStep& t,
                                                           const ChunkRoute& chunk) {
  const uint32_t leader = plan.node->LeaderOf(t.tensor_id, chunk.index);
  if (leader == plan.rank) return sender_.ConnectToServer(chunk.server);  // pushes the sum
  return sender_.ConnectToNodeMate(plan.node->AddressOf(leader));
}

absl::Status NodeLeaderRoute::Send(const RunningStep& step, size_t i, size_t c, const float* x,
                                   StepReport& report) {
  const TensorStep& t = step.plan.tensors[i];
  if (x == nullptr) {
    return InTensor(
        absl::UnimplementedError("node-local aggregation of a device tensor is not built"),
        t.tensor_id);
  }
  TensorBuffers& buffers = *step.buffers[i];
  const ChunkSlot& slot = buffers.chunks()[c];
  const uint64_t elements = slot.shape.rows * slot.shape.cols;
  // The stage writes the transformed rows as they are reached.
  if (auto s = buffers.stage().PrepareRange(slot.offset, elements); !s.ok()) return s;
  if (step.plan.node->LeaderOf(t.tensor_id, slot.index) == step.plan.rank) {
    sums_.Lead({t.tensor_id, slot.index}, x + slot.offset, elements, (i << 32) | c);
    return absl::OkStatus();
  }
  return sender_.SendToLeader(step.plan, t, x, slot, step.peers[i][c], step.run, report);
}

absl::Status NodeLeaderRoute::Progress(const RunningStep& step, StepReport& report) {
  const StepPlan& plan = step.plan;
  for (NodeContribution& c : inbox_.TakeNodeContributions(plan.epoch, plan.step)) {
    // With authentication, only what a worker of this node sealed.
    if (plan.keys != nullptr) {
      if (auto failure = dataplane::CheckChunk(*plan.keys, c.header, c.header_bytes, c.payload);
          failure.has_value()) {
        inbox_.CountAuthFailure(*failure);
        continue;
      }
    }
    // Of another world (cannot be this epoch's), or not a chunk led here.
    if (c.header.world_size != plan.world_size || !sums_.Offer(std::move(c)).ok()) {
      inbox_.CountStray();
    }
  }
  for (const NodeSums::Key& key : sums_.Ready()) {
    auto taken = sums_.TakeSum(key, scratch_, codec_options_);
    if (!taken.ok()) return taken.status();
    const size_t i = *taken >> 32, c = *taken & 0xffffffffu;
    ChunkSlot& slot = step.buffers[i]->chunks()[c];
    if (auto s = sender_.PushNodeSum(plan, plan.tensors[i], scratch_.data(),
                                     static_cast<uint32_t>(plan.node->size()), slot,
                                     step.peers[i][c], step.run, report);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::worker
