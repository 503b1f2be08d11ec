// The arithmetic of one completed (step, chunk) of ChunkReducer
// (chunk_reducer.h): the received pushes summed in rank order in FP32,
// scaled by 1/P (P: the step's slots, the world size) and encoded once into
// a send buffer, bit for bit codec::ReduceEncoded of the same inputs.
//
// Ownership: reads `inputs` (its received slots' views) and writes `out`;
// keeps nothing. Uses a thread-local scratch vector, kept across calls.
//
// Thread safety: thread-compatible: concurrent calls on different inputs
// and buffers are fine (ChunkReducer::Reduce runs it without its mutex, on
// a step claimed by a ReductionJob and a result buffer nothing else holds).
#ifndef GIFT_SERVER_AGGREGATOR_STEP_REDUCTION_H_
#define GIFT_SERVER_AGGREGATOR_STEP_REDUCTION_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_shape.h"
#include "server/aggregator/reducer_slots.h"
#include "server/aggregator/reusable_buffer.h"

namespace gift::server::reducer_internal {

// Encodes the average of the received slots of `inputs` (a chunk of
// `shape`) into `out`, resized through `registry` and registered, as a
// complete payload: with `pull_spec`, or FP32 when every input is FP32 (an
// exact reduction is never rounded). Stochastic rounding draws from
// `rng_key`. InvalidArgument on a non-finite sum or a spec the shape does
// not fit; `out` then holds no valid payload.
absl::Status EncodeAverage(const StepInputs& inputs, const dataplane::ChunkShape& shape,
                           const codec::CodecSpec& pull_spec, const codec::RngKey& rng_key,
                           const codec::CodecOptions& codec_options, ReusableBuffer& out,
                           const std::shared_ptr<BufferRegistry>& registry);

}  // namespace gift::server::reducer_internal

#endif  // GIFT_SERVER_AGGREGATOR_STEP_REDUCTION_H_
