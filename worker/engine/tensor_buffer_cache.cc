#include "worker/engine/tensor_buffer_cache.h"

#include <utility>

#include "worker/engine/step_failure.h"

namespace gift::worker {

absl::StatusOr<TensorBuffers*> TensorBufferCache::For(
    const TensorStep& t, absl::Span<const dataplane::ChunkShape> shapes, uint64_t run) {
  const codec::CodecSpec& spec = t.push_spec;
  const Key key{t.tensor_id,     spec.format,   spec.scaling,
                spec.block_size, spec.rounding, spec.block_scale_fit};
  std::unique_ptr<TensorBuffers>& entry = buffers_[key];
  std::unique_ptr<TensorBuffers> previous;  // replaced: its residual may carry over
  if (entry != nullptr && !entry->Fits(t)) previous = std::move(entry);
  if (entry == nullptr) {
    auto created = TensorBuffers::Create(
        t, shapes, spec, {.error_feedback = t.error_feedback, .codec_options = codec_options_},
        &transport_, previous.get(), device_stages_);
    if (previous != nullptr && !inbox_.Idle(*previous)) retired_.push_back(std::move(previous));
    if (!created.ok()) {
      buffers_.erase(key);
      return InTensor(created.status(), t.tensor_id);
    }
    entry = *std::move(created);
  }
  if (auto s = entry->UseTransform(t); !s.ok()) return InTensor(s, t.tensor_id);
  entry->last_run = run;
  return entry.get();
}

void TensorBufferCache::ResetResiduals() {
  for (auto& [key, buffers] : buffers_) buffers->stage().ResetResidual();
}

void TensorBufferCache::Collect(uint64_t run) {
  // Freed outside the inbox's lock (unregistering waits for the progress
  // thread).
  std::vector<std::unique_ptr<TensorBuffers>> unused;
  for (auto& b : retired_) {
    if (inbox_.Idle(*b)) unused.push_back(std::move(b));
  }
  std::erase(retired_, nullptr);
  for (auto& [key, b] : buffers_) {
    if (run - b->last_run > evict_after_runs_ && inbox_.Idle(*b)) unused.push_back(std::move(b));
  }
  absl::erase_if(buffers_, [](const auto& entry) { return entry.second == nullptr; });
  uint64_t feedback_bytes = 0;
  for (const auto& [key, b] : buffers_) feedback_bytes += b->error_feedback_bytes();
  error_feedback_bytes_.store(feedback_bytes, std::memory_order_relaxed);
}

void TensorBufferCache::ReleaseRegions() {
  for (auto& [key, buffers] : buffers_) buffers->ReleaseRegions();
  for (auto& buffers : retired_) buffers->ReleaseRegions();
}

}  // namespace gift::worker
