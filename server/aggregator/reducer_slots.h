// The receive-side bookkeeping of ChunkReducer (chunk_reducer.h): for each
// chunk a shard owns, its open steps, each with one receive slot per rank
// (the bytes of that rank's push), the closed steps kept as spares for reuse
// (slots, buffers and capacity with them), and its result send buffers; and
// the end of a chunk's open steps: by an epoch's end (aborted) or by a later
// step of the chunk completing (superseded).
//
// Ownership: a ChunkState owns its StepInputs (open and spare) and holds its
// result buffers shared with the ChunkResults that send them. A Slot owns
// its buffer; its view points into that buffer.
//
// Thread safety: thread-compatible. ChunkReducer calls every function here
// under its mutex; a StepInputs claimed by a ReductionJob is used outside
// it by that job alone.
#ifndef GIFT_SERVER_AGGREGATOR_REDUCER_SLOTS_H_
#define GIFT_SERVER_AGGREGATOR_REDUCER_SLOTS_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/codec/codec.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_shape.h"
#include "server/aggregator/incomplete_steps.h"
#include "server/aggregator/reusable_buffer.h"

namespace gift::server::reducer_internal {

// One rank's push of one step.
struct Slot {
  enum class State { kEmpty, kPlaced, kReceived };
  State state = State::kEmpty;
  ReusableBuffer buffer;    // the payload's bytes (capacity kept across steps)
  codec::EncodedView view;  // into `buffer`, once received
};

// The pushes of one (step, chunk), by rank.
struct StepInputs {
  uint64_t step = 0;
  uint64_t basis_version = 0;  // of the first push received
  uint32_t received = 0;       // ranks counted (a node sum counts its group)
  std::vector<Slot> slots;
  std::vector<uint8_t> covered;  // by rank: counted
};

struct ChunkState {
  explicit ChunkState(dataplane::ChunkShape s) : shape(s) {}
  const dataplane::ChunkShape shape;
  // Open steps (usually one) and closed ones kept for reuse, buffers and all.
  absl::flat_hash_map<uint64_t, std::unique_ptr<StepInputs>> steps;
  std::vector<std::unique_ptr<StepInputs>> spare;
  // Send buffers of results; one is free when nothing else holds it.
  std::vector<std::shared_ptr<ReusableBuffer>> results;
};

// The open inputs of `step` of `chunk`; a new one (taken from the spares
// when there is one) has `world_size` empty slots and nothing received.
StepInputs& OpenStep(ChunkState& chunk, uint64_t step, uint32_t world_size);

// Closes `step` of `chunk` (back to the spares) when nothing was received
// and no slot of it is placed or received any more; else does nothing.
void RecycleIfUnused(ChunkState& chunk, uint64_t step);

// FailedPrecondition when `header`'s basis version differs from that of the
// ranks `inputs` already received (versions are never mixed).
absl::Status CheckVersion(const dataplane::ChunkHeader& header, const StepInputs& inputs);

// Copies `payload` into `slot` (resized through `registry`) and returns
// `view`, the parse of `payload`, pointing into the slot's bytes instead.
codec::EncodedView CopyIntoSlot(Slot& slot, const std::vector<uint8_t>& payload,
                                const codec::EncodedView& view,
                                const std::shared_ptr<BufferRegistry>& registry);

// What ending open steps left behind (EndOpenSteps adds to it).
struct EndedSteps {
  // A kAbort header (status kAborted) for every ended step some rank had
  // pushed; null: none (steps every rank has moved past). Not owned.
  std::vector<dataplane::ChunkHeader>* aborted = nullptr;
  // The ended steps some rank had pushed, with the ranks they missed; null:
  // not collected. Not owned.
  IncompleteSteps* incomplete = nullptr;
  // The buffers of placed slots, whose payload the transport may still be
  // writing. Not owned.
  std::vector<ReusableBuffer>* orphans = nullptr;
  uint64_t pushed_steps = 0;    // steps some rank had pushed
  uint64_t received_bytes = 0;  // payload bytes of the received slots
};

// Ends every open step below `below` (all of them by default) of chunk
// (tensor_id, chunk_index) of `epoch`: all its slots empty (placed ones
// orphaned), the steps back to the spares.
void EndOpenSteps(ChunkState& chunk, uint64_t tensor_id, uint32_t chunk_index, uint64_t epoch,
                  uint32_t world_size, EndedSteps& ended,
                  uint64_t below = std::numeric_limits<uint64_t>::max());

// Drops the transport registration of every buffer of `chunk` (the slots
// of its open and spare steps, its results), keeping their memory. Never on
// the transport's progress thread.
void UnregisterBuffers(ChunkState& chunk);

}  // namespace gift::server::reducer_internal

#endif  // GIFT_SERVER_AGGREGATOR_REDUCER_SLOTS_H_
