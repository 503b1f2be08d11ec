// The push-pull engine's TensorBuffers (tensor_buffers.h), one per (tensor,
// push spec) (a measured step's FP32 exchange keeps its own), built when
// first planned, rebuilt when the plan no longer fits them (the error
// feedback residual carried over where it can be), and freed once unused
// for PushPullEngine::kEvictAfterRuns runs.
//
// Ownership: owns the buffers; `transport` (which registers them) and
// `inbox` (which says when they are idle) are not owned and must outlive
// the cache. Buffers replaced while a send from them or a placement into
// them was in flight are kept until idle. Thread safety: the engine's Run
// thread, but error_feedback_bytes (any thread).
#ifndef GIFT_WORKER_ENGINE_TENSOR_BUFFER_CACHE_H_
#define GIFT_WORKER_ENGINE_TENSOR_BUFFER_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transport/transport.h"
#include "worker/engine/result_inbox.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/tensor_buffers.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {

class TensorBufferCache {
 public:
  TensorBufferCache(transport::Transport& transport, const ResultInbox& inbox,
                    const codec::CodecOptions& codec_options, DeviceStageFactory device_stages,
                    uint64_t evict_after_runs)
      : transport_(transport),
        inbox_(inbox),
        codec_options_(codec_options),
        device_stages_(std::move(device_stages)),
        evict_after_runs_(evict_after_runs) {}

  // The buffers for `t` (checked: shapes[k] is the shape of t.chunks[k]),
  // built or rebuilt as needed, using t's transform, marked used by `run`.
  // Errors (annotated with the tensor): TensorBuffers::Create's,
  // UseTransform's.
  absl::StatusOr<TensorBuffers*> For(const TensorStep& t,
                                     absl::Span<const dataplane::ChunkShape> shapes, uint64_t run);
  // Clears every error feedback residual (a new set of workers).
  void ResetResiduals();
  // Frees what is idle and replaced, or unused since `run` -
  // evict_after_runs; updates error_feedback_bytes. Outside any step.
  void Collect(uint64_t run);
  // Unregisters every buffer (before the transport goes away).
  void ReleaseRegions();
  // Bytes of the error feedback residuals, as of the last Collect.
  uint64_t error_feedback_bytes() const {
    return error_feedback_bytes_.load(std::memory_order_relaxed);
  }

 private:
  // A tensor's buffers per push codec (a basis version may change it: the
  // fidelity target); every field of the spec counts.
  using Key = std::tuple<uint64_t, codec::Format, codec::Scaling, uint32_t, codec::Rounding,
                         codec::BlockScaleFit>;

  transport::Transport& transport_;
  const ResultInbox& inbox_;
  const codec::CodecOptions codec_options_;
  const DeviceStageFactory device_stages_;
  const uint64_t evict_after_runs_;
  absl::flat_hash_map<Key, std::unique_ptr<TensorBuffers>> buffers_;
  std::vector<std::unique_ptr<TensorBuffers>> retired_;  // replaced while busy
  std::atomic<uint64_t> error_feedback_bytes_{0};
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_TENSOR_BUFFER_CACHE_H_
