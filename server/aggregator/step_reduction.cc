#include "server/aggregator/step_reduction.h"

#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"

namespace gift::server::reducer_internal {

absl::Status EncodeAverage(const StepInputs& inputs, const dataplane::ChunkShape& shape,
                           const codec::CodecSpec& pull_spec, const codec::RngKey& rng_key,
                           const codec::CodecOptions& codec_options, ReusableBuffer& out,
                           const std::shared_ptr<BufferRegistry>& registry) {
  absl::InlinedVector<codec::EncodedView, 8> views;
  bool exact = true;
  for (const Slot& slot : inputs.slots) {
    if (slot.state != Slot::State::kReceived) continue;  // counted in a node sum
    views.push_back(slot.view);
    exact = exact && slot.view.spec.format == codec::Format::kF32;
  }
  const size_t world = inputs.slots.size();
  const codec::CodecSpec out_spec =
      exact ? codec::CodecSpec{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone}
            : pull_spec;
  const uint64_t dims[] = {shape.rows, shape.cols};
  auto size = codec::PayloadSizeFor(out_spec, dims);
  if (!size.ok()) return size.status();
  out.Resize(*size, registry);
  out.Register();
  auto view = codec::StartPayload(out_spec, dims, out.span());
  if (!view.ok()) return view.status();
  thread_local std::vector<float> scratch;
  const uint64_t need = codec::ReduceScratchFloats(shape.cols);
  if (scratch.size() < need) scratch.resize(need);
  if (auto s = codec::ReduceEncodedBlocked(views, 1.0f / static_cast<float>(world), *view,
                                           absl::MakeSpan(scratch), rng_key, codec_options);
      !s.ok()) {
    return s;
  }
  codec::FinishPayload(out.span());
  return absl::OkStatus();
}

}  // namespace gift::server::reducer_internal
