// The sending side of the push-pull engine: the connections a step's
// chunks leave through, and each chunk encoded, sealed and sent. Every send
// goes through one tracked send (Send below): the ResultInbox counts it in
// flight (its slot is not rewritten and the engine not destroyed before it
// completes), and a failed completion aborts the step it was sent for, if
// that step is still in flight.
//
//   ChunkSender sender(transport, inbox, codec_options);
//   auto peer = sender.ConnectToServer(chunk.server);
//   sender.PushChunk(plan, t, stage, slot, *peer, run, report);
//
// Ownership: `transport` and `inbox` are not owned and must outlive the
// sender (and every send it made: ResultInbox::AwaitSends). Thread safety:
// the Run thread's, but for Forget (any thread).
#ifndef GIFT_WORKER_ENGINE_CHUNK_SENDER_H_
#define GIFT_WORKER_ENGINE_CHUNK_SENDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/dataplane/chunk_header.h"
#include "common/transport/connection_cache.h"
#include "common/transport/transport.h"
#include "worker/engine/result_inbox.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {

struct ChunkSlot;

class ChunkSender {
 public:
  ChunkSender(transport::Transport& transport, ResultInbox& inbox,
              const codec::CodecOptions& codec_options)
      : transport_(transport), inbox_(inbox), codec_options_(codec_options) {}

  // The connection to the server at `address`, connected on first use and
  // recorded as one the step uses (ResultInbox::UseServer). Unavailable,
  // naming the server (AggregatorFailure), when it cannot be reached or its
  // connection was reported failed.
  absl::StatusOr<transport::PeerId> ConnectToServer(const std::string& address);
  // The connection to another worker of the node group at `address`
  // (ResultInbox::UseNodeMate). Unavailable when it cannot be reached.
  absl::StatusOr<transport::PeerId> ConnectToNodeMate(const std::string& address);
  // Drops `peer`'s cached connection (it failed). Any thread.
  void Forget(transport::PeerId peer) { connections_.Forget(peer); }

  // Encodes chunk `slot` of `t` through `stage` into slot.send with t's
  // push codec (stochastic rounding keyed dataplane::ChunkRngKey), seals it
  // with plan.keys (when set) and pushes it to `peer`, for the step of
  // `run`. Errors: the stage's (annotated with the chunk), the seal's, the
  // send's (an AggregatorFailure).
  absl::Status PushChunk(const StepPlan& plan, const TensorStep& t, TensorCodecStage& stage,
                         ChunkSlot& slot, transport::PeerId peer, uint64_t run, StepReport& report);
  // Encodes `sum` (the node group's FP32 sum of chunk `slot` of `t`) with
  // t's push codec into slot.send and pushes it to `peer` as the group's
  // (kNodePush, `ranks_summed` ranks).
  absl::Status PushNodeSum(const StepPlan& plan, const TensorStep& t, const float* sum,
                           uint32_t ranks_summed, ChunkSlot& slot, transport::PeerId peer,
                           uint64_t run, StepReport& report);
  // Sends chunk `slot` of `t` (the rows of `x` it covers) in FP32 to its
  // leader `peer` in the node group (kNodeMember), from a payload of its
  // own.
  absl::Status SendToLeader(const StepPlan& plan, const TensorStep& t, const float* x,
                            const ChunkSlot& slot, transport::PeerId peer, uint64_t run,
                            StepReport& report);

 private:
  // The one tracked send: header + payload to `peer`. `slot`, when not null,
  // holds the payload (its send_in_flight is set until completion);
  // `owned` keeps an owned payload alive until then. `to_server`: a push to
  // a server. A failure is described as "<what>: ..." (ResultInbox::
  // SendFailure).
  absl::Status Send(transport::PeerId peer, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, ChunkSlot* slot,
                    std::shared_ptr<const void> owned, bool to_server, uint64_t run,
                    const char* what);

  transport::Transport& transport_;
  ResultInbox& inbox_;
  const codec::CodecOptions codec_options_;
  transport::ConnectionCache connections_;
};

// The header of this worker's chunk `chunk_index` of `t` in `plan`, of `kind`
// (a push, a node push or a node member's chunk).
dataplane::ChunkHeader OwnChunkHeader(dataplane::ChunkKind kind, const StepPlan& plan,
                                      const TensorStep& t, uint32_t chunk_index);

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_CHUNK_SENDER_H_
