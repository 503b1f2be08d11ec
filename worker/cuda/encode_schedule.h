// The device stage's encode-ahead bookkeeping (device_codec_stage.h), kept
// apart from CUDA so that it is tested on its own: which chunk's encode to
// enqueue when, into which slot (a slot is a chunk's event and non-finite
// check, numbered by the chunk's position in the step), and whether an
// encode enqueued ahead of its EncodeChunk call is the one the call asks for.
//
// The engine calls EncodeChunk for a tensor's chunks one at a time and
// sends each as soon as the call returns, so the stage only learns chunk
// k + 1 when chunk k is already on its way. But within one send arena the
// engine asks for the same chunks in the same order every step (the arena
// is laid out for them). So the schedule remembers the previous step's
// calls on the arena and predicts the next ones: at call k it names chunks
// k + 1 .. k + ahead of the previous step (their RNG key taken with call
// k's step) to encode ahead, into the stage's own device memory only. When
// call j comes, it is compared field by field with what was predicted for
// j: equal, its encode is already enqueued (the stage copies and waits);
// different (a rank changed, a failed step was shorter, another caller),
// the call is encoded now, stream-ordered after the prediction it replaces,
// and nothing more is predicted in that step. Nothing is predicted in a
// step that follows no step on the arena, nor from a step whose chunks'
// bytes overlapped (then an encode ahead could overwrite, in the device
// mirror, a predicted chunk enqueued before it and later confirmed).
//
//   EncodeSchedule s(ahead);
//   s.Forget();                 // a new arena
//   s.StartStep();              // Prepare
//   auto plan = s.Next(call);   // each EncodeChunk, in order
//   // plan.encode: encode `call` into slot plan.slot now;
//   // plan.ahead: then encode these predictions into their slots.
//   s.NotEnqueued(j);           // an encode ahead of slot j could not be enqueued
//
// Thread safety: none (the stage's one thread). Holds copies of the views'
// host pointers, never dereferences them.
#ifndef GIFT_WORKER_CUDA_ENCODE_SCHEDULE_H_
#define GIFT_WORKER_CUDA_ENCODE_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"

namespace gift::worker {

// One EncodeChunk call's arguments, and the bytes its view's codes and
// scales take (codec::ComputeLayout).
struct ChunkEncode {
  uint64_t offset = 0;
  codec::MutableEncodedView view;
  codec::RngKey key;
  uint64_t code_bytes = 0;
  uint64_t scale_bytes = 0;
};

// Every field equal (spec, shape, buffer pointers, offset, key).
bool SameEncode(const ChunkEncode& a, const ChunkEncode& b);

class EncodeSchedule {
 public:
  // `ahead`: how many chunks past the current one are encoded ahead (0: none).
  explicit EncodeSchedule(size_t ahead) : ahead_(ahead) {}

  struct Ahead {
    size_t slot;
    ChunkEncode call;
  };
  struct Plan {
    size_t slot = 0;           // the call's chunk position in the step: its event and check
    bool encode = true;        // not enqueued ahead as asked: encode it now
    std::vector<Ahead> ahead;  // then enqueue these, in this order
  };

  // The send arena changed: the previous calls say nothing about the next.
  void Forget();
  // A new step (Prepare): the next call is its chunk 0; predictions of an
  // earlier step are dropped (their encodes may be left on the stream, and
  // are overwritten in stream order).
  void StartStep();
  // The plan of the step's next EncodeChunk call.
  Plan Next(const ChunkEncode& call);
  // The encodes ahead from slot `slot` on, named by the last Next, were not
  // enqueued: their calls will be encoded when they come.
  void NotEnqueued(size_t slot);

  size_t ahead() const { return ahead_; }

 private:
  const size_t ahead_;
  std::vector<ChunkEncode> previous_;                  // the calls of the last step on this arena
  std::vector<ChunkEncode> current_;                   // this step's calls so far
  std::vector<std::optional<ChunkEncode>> predicted_;  // by slot: enqueued ahead as this
  bool diverged_ = false;                              // a call differed from its prediction
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_CUDA_ENCODE_SCHEDULE_H_
