// What the push-pull engine runs: one step's plan (StepPlan: the step,
// this worker's rank, and for each tensor its buffer, transform, chunks and
// their servers, push codec) and what the step cost (StepReport). The step
// planner (worker/plan/step_planner.h) builds plans from the cluster state; the
// engine (push_pull_engine.h) runs them.
//
// Plain data: no ownership beyond what each field says, no thread safety.
#ifndef GIFT_WORKER_ENGINE_STEP_PLAN_H_
#define GIFT_WORKER_ENGINE_STEP_PLAN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transform/gradient_transform.h"
#include "worker/engine/node_group.h"

namespace gift::worker {

struct ChunkRoute {
  uint32_t index = 0;
  uint64_t offset = 0;  // first element
  uint64_t num_elements = 0;
  std::string server;  // the aggregator's transport address
};

struct TensorStep {
  uint64_t tensor_id = 0;
  uint64_t rows = 0;  // the 2-D view: product of all dimensions but the last
  uint64_t cols = 0;  // the last dimension
  // In: this worker's gradient; out: the average over the world. Not owned;
  // valid and untouched by others during Run. Host memory, or CUDA device
  // memory when `device` (then the engine's device stage runs the transform
  // and codec on the GPU: PushPullEngineOptions::device_stages).
  float* data = nullptr;
  bool device = false;
  // Null: direct quantization. Otherwise its shape must be rows x cols.
  std::shared_ptr<const transform::GradientTransform> transform;
  // > 0: each row rotated in blocks of this many elements after the
  // transform (transform::RotatedTransform; every worker alike, from the
  // policy's transform.rotation_block); a power of two dividing cols.
  uint32_t rotation_block = 0;
  uint64_t basis_version = 0;
  std::vector<ChunkRoute> chunks;  // must cover the tensor exactly once
  // How this tensor's chunks are encoded (the policy's per-tensor push
  // codec). Results come back in whatever codec the servers chose: each
  // result payload names its own format.
  codec::CodecSpec push_spec;
  // Error feedback in the tensor's encoder pipeline (encoder_pipeline.h):
  // the residual is kept per (tensor, push spec), advances only with a step
  // that succeeded, is remapped when the transform changes and is cleared
  // when the world changes (StepPlan::worker_set). Set per tensor from the
  // policy (step_planner.h); off by default.
  bool error_feedback = false;
};

struct StepPlan {
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  // Identifies the set of workers (their member ids and ranks; the step
  // planner hashes them). A plan whose (world_size, worker_set) differs from
  // the previous plan's clears every error feedback residual first: a
  // residual of another world is not this one's quantization error. Kept
  // across epochs that keep the set (a server joined or left).
  uint64_t worker_set = 0;
  std::vector<TensorStep> tensors;
  // How long Run waits for the results after the last push; unset: the
  // engine's timeout. (The daemon bounds its statistics exchanges with it.)
  std::optional<absl::Duration> result_timeout;
  // Data-plane authentication (common/dataplane/chunk_mac.h): this
  // worker's keys of the epoch (peers: the servers' by shard id). Pushes
  // leave sealed with `keys->own`; a result or abort counts only when sealed
  // by a server's key (others are dropped, counted in auth_failures()).
  // Null: authentication off.
  std::shared_ptr<const dataplane::EpochKeys> keys;
  // Node-local aggregation (node_group.h; Policy.hierarchy NODE): this
  // worker's node group of the epoch. Each chunk goes to its leader in the
  // group (FP32) instead of its server, and the chunks this worker leads
  // are pushed as the group's sum once every member's chunk is in. A
  // member's failure does not fail the step by itself (the step completes
  // if the member's chunks made it into the node's sums; otherwise the
  // epoch change that evicts it aborts the step). Workers of one group must run the
  // same steps with the same group. The servers send every result to every
  // rank, as without a group. Null: every chunk is pushed directly. With
  // `keys`, the members' chunks are sealed with keys->node (required).
  std::shared_ptr<const NodeGroup> node;
};

// `plan` without its tensors: what PushPullEngine::Begin takes.
StepPlan StepHeader(const StepPlan& plan);

struct StepReport {
  uint64_t bytes_pushed = 0;  // payload bytes sent
  uint64_t bytes_pulled = 0;  // payload bytes received
  double encode_seconds = 0;  // transform + encode
  double wait_seconds = 0;    // from the last push to the last result
  double decode_seconds = 0;  // decode + inverse transform
  // Node-local aggregation: payload bytes sent within the node group
  // (chunks to their leaders); not in bytes_pushed, which counts what went
  // to the servers.
  uint64_t node_bytes_sent = 0;
  // The same payload bytes by tensor (its position in the step's plan; the
  // vector grows to the last tensor that sent or received a chunk).
  struct TensorBytes {
    uint64_t pushed = 0;
    uint64_t pulled = 0;
  };
  std::vector<TensorBytes> by_tensor;

  void CountPushed(size_t tensor, uint64_t bytes) {
    bytes_pushed += bytes;
    Of(tensor).pushed += bytes;
  }
  void CountPulled(size_t tensor, uint64_t bytes) {
    bytes_pulled += bytes;
    Of(tensor).pulled += bytes;
  }
  // Tensor `tensor`'s bytes (zeros when it moved none).
  TensorBytes bytes_of(size_t tensor) const {
    return tensor < by_tensor.size() ? by_tensor[tensor] : TensorBytes{};
  }

 private:
  TensorBytes& Of(size_t tensor) {
    if (by_tensor.size() <= tensor) by_tensor.resize(tensor + 1);
    return by_tensor[tensor];
  }
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_STEP_PLAN_H_
