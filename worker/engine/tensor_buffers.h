// The long-lived buffers of one tensor's push-pull steps, sized when the
// tensor's plan is first seen (or its shape, chunking or push spec changes)
// and reused every step, so a steady-state step allocates, zeroes and
// faults in nothing of its size:
//
//   - the tensor's TensorCodecStage (tensor_codec_stage.h: transform +
//     codec + optional error feedback, with the transformed gradient and the
//     decoded sum in its own memory; host, or device for a device tensor),
//   - one send arena holding every chunk's payload back to back (the encoder
//     writes straight into it, the transport sends from it),
//   - one result slot per chunk, grown to the size results arrive in
//     (capacity kept), that the transport places results into.
//
// The arena and the slots are registered with the transport (zero-copy
// RDMA) when it can; registration failing is not an error.
//
// Ownership and thread safety: owned by the engine's TensorBufferCache and
// used by the engine's Run thread; the fields of ChunkSlot marked "inbox
// mutex" are read and written by the transport's threads under the
// ResultInbox's mutex. A
// TensorBuffers must not be destroyed (nor ReleaseRegions called) while a
// send from it or a placed receive into it is in flight (ChunkSlot::Busy).
#ifndef GIFT_WORKER_ENGINE_TENSOR_BUFFERS_H_
#define GIFT_WORKER_ENGINE_TENSOR_BUFFERS_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transform/encoder_pipeline.h"
#include "common/transform/rotated_transform.h"
#include "common/transport/transport.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {

struct ChunkSlot {
  // The chunk, as planned.
  uint32_t index = 0;
  uint64_t offset = 0;  // first element in the tensor
  dataplane::ChunkShape shape;
  size_t tensor = 0;       // the tensor's position in the step being run
  uint64_t tensor_id = 0;  // the tensor's id (ResultInbox files the slot by it)

  absl::Span<uint8_t> send;  // the chunk's payload, in the send arena

  // The result slot: `result.size()` is its capacity. Resized only by the
  // Run thread while no step is in flight.
  std::vector<uint8_t> result;
  std::unique_ptr<transport::MemoryRegion> result_region;

  // Inbox mutex (result_inbox.h):
  bool send_in_flight = false;         // its payload is being sent
  transport::PeerId send_peer = 0;     // to this peer (while send_in_flight)
  uint64_t send_serial = 0;            // of the latest send (ResultInbox::SendStarted)
  uint32_t detached_sends = 0;         // sends from an arena given up (RenewSendArena)
  bool placed = false;                 // this step's result was placed in `result`
  bool placement_outstanding = false;  // placed, but not delivered yet
  bool arrived = false;                // this step's result is in
  uint64_t result_bytes = 0;           // the arrived result's size
  std::vector<uint8_t> unplaced;       // the arrived result, when not placed

  bool Busy() const { return send_in_flight || detached_sends > 0 || placement_outstanding; }
  // The arrived result, wherever it landed (inbox mutex, or after arrival).
  absl::Span<const uint8_t> result_bytes_view() const {
    return placed ? absl::Span<const uint8_t>(result.data(), result_bytes)
                  : absl::Span<const uint8_t>(unplaced);
  }
};

class TensorBuffers {
 public:
  // Builds the buffers for `t` (checked by the caller: shapes[i] is the
  // shape of t.chunks[i]) with `spec` as the push codec. `transport` is used
  // to register the buffers and must outlive this object. `previous`, when
  // not null, is the tensor's buffers these replace (same push spec): when
  // both have error feedback and the same shape and memory kind (a new
  // chunking, e.g. after a server joined or left), its stage, residual
  // included, moves to the new buffers; `previous` may then only be
  // released and destroyed. A device tensor (t.device) gets its stage from
  // `device_stages`. Errors: InvalidArgument (the spec, the pipeline),
  // Unimplemented (a device tensor and no `device_stages`), the device
  // stage's.
  static absl::StatusOr<std::unique_ptr<TensorBuffers>> Create(
      const TensorStep& t, absl::Span<const dataplane::ChunkShape> shapes,
      const codec::CodecSpec& spec, const transform::EncoderPipelineOptions& pipeline_options,
      transport::Transport* transport, TensorBuffers* previous = nullptr,
      const DeviceStageFactory& device_stages = nullptr);
  ~TensorBuffers();

  // Whether these buffers serve `t` as planned: same shape, same chunks in
  // the same order, error feedback requested alike, same memory kind.
  bool Fits(const TensorStep& t) const;

  // Makes the pipeline use `t`'s transform (the identity when it is null),
  // followed by its rotation (t.rotation_block), remapping the error
  // feedback residual (SwitchBasis) when that changes.
  absl::Status UseTransform(const TensorStep& t);

  // Grows `slot`'s result capacity to `bytes` (a result that size could not
  // be placed) and registers it again. Only while the slot is not Busy.
  void GrowResult(ChunkSlot& slot, size_t bytes);

  // Moves the chunks' send buffers to a fresh arena (registered and given to
  // the stage like the first), and keeps the old one, unwritten, until these
  // buffers are destroyed: sends still reading it (a push to a stopped
  // server: PushPullEngine::AwaitSendBuffers) go on while the next step
  // encodes. The caller detaches those sends (ResultInbox::DetachSends).
  // Errors: the stage's.
  absl::Status RenewSendArena();
  // Arenas RenewSendArena kept.
  size_t retired_arenas() const { return retired_arenas_.size(); }
  // Unregisters and frees them. Only once no detached send reads them
  // (ResultInbox::DetachedSendsEnded).
  void FreeRetiredArenas();

  // Unregisters every buffer (before the transport goes away).
  void ReleaseRegions();

  TensorCodecStage& stage() { return *stage_; }
  // FP32 bytes of the error feedback residual and its pending copy (0 without).
  uint64_t error_feedback_bytes() const { return stage_->error_feedback_bytes(); }
  std::vector<ChunkSlot>& chunks() { return chunks_; }
  const std::vector<ChunkSlot>& chunks() const { return chunks_; }

  // Bookkeeping of the engine's Run thread.
  uint64_t last_run = 0;   // the engine's run counter when last used
  size_t chunks_left = 0;  // chunks of the current step not decoded yet

 private:
  TensorBuffers(std::shared_ptr<const transform::GradientTransform> identity,
                transport::Transport* transport)
      : identity_(std::move(identity)), transport_(transport) {}

  // The transform the stage runs: `t` (identity_ when null), followed by
  // the rotation when rotation_block > 0. The rotated transform is kept
  // while `t` and the block stay, so the stage sees the same object (no
  // switch) step after step. Errors: RotatedTransform::Create's.
  absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> StageTransform(
      const std::shared_ptr<const transform::GradientTransform>& t, uint32_t rotation_block);

  // The direct path's transform (kept to switch back to it).
  std::shared_ptr<const transform::GradientTransform> identity_;
  std::shared_ptr<const transform::RotatedTransform> rotated_;  // see StageTransform
  transport::Transport* transport_;
  uint64_t rows_ = 0, cols_ = 0;
  bool device_ = false;
  bool error_feedback_ = false;  // as requested by the plan
  std::vector<uint8_t> send_arena_;
  std::unique_ptr<transport::MemoryRegion> send_region_;
  // Arenas given up by RenewSendArena, with their registrations.
  struct RetiredArena {
    std::vector<uint8_t> bytes;
    std::unique_ptr<transport::MemoryRegion> region;
  };
  std::vector<RetiredArena> retired_arenas_;
  std::vector<ChunkSlot> chunks_;
  // After the arena: a device stage unpins it when destroyed.
  std::unique_ptr<TensorCodecStage> stage_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_TENSOR_BUFFERS_H_
