// The data path of a worker daemon for one step: for each tensor, transform
// (GIFT basis or direct) -> cut into the shard map's chunks -> encode each
// chunk with the push codec -> push it to the chunk's aggregator server ->
// receive the servers' reduced chunks -> decode -> inverse transform ->
// write the average back into the tensor's buffer.
//
//   auto engine = PushPullEngine::Create(make_transport, {});
//   StepPlan plan{.epoch = e, .step = s, .rank = r, .world_size = p,
//                 .tensors = {{.tensor_id = 7, .rows = m, .cols = n, .data = grad,
//                              .transform = basis, .basis_version = 3, .chunks = routes,
//                              .push_spec = spec}}};
//   auto report = engine->Run(plan);   // grad now holds the average
//
// Pushes leave as soon as each chunk is encoded, so encoding overlaps the
// transfer of earlier chunks, in one order for every worker (by tensor id,
// whatever the order of the plan's tensors), so that a server completes chunk
// k while chunk k+1 arrives and its results stream back meanwhile; each result chunk is decoded on
// the Run thread as soon as it arrives (between encodes, or while waiting), and a tensor is
// inverse-transformed as soon as all its chunks are in. Stochastic rounding
// is keyed dataplane::ChunkRngKey(tensor, chunk, step, rank), so chunks of
// one tensor draw independent streams.
//
// Steady state at memory speed: each tensor's buffers (TensorBuffers: the
// pipeline, the transformed gradient / decoded sum, the encoded payloads the
// transport sends from, the result slots it places results into) are sized
// when its plan is first seen, or when its shape, chunking or push spec
// changes, and reused every step; payloads are encoded straight into the
// send buffers and results parsed in place. A step waits for the sends of
// the previous one from the same buffers to complete before rewriting them.
// Buffers of a (tensor, spec) unused for kEvictAfterRuns runs are freed.
// Memory per (tensor, spec) in use: one FP32 buffer of the tensor's size,
// its encoded payloads, and its results' size.
//
// The engine is thin: it checks the plan, runs the step's tensors through
// the classes below and writes the results back.
//   - TensorBufferCache (tensor_buffer_cache.h): each tensor's buffers.
//   - A StepRoute (step_route.h): where each chunk goes. ServerRoute pushes
//     it to its server; NodeLeaderRoute (StepPlan::node) sends it to its
//     leader in the node group, which pushes the group's sum.
//   - ChunkSender (chunk_sender.h): the connections, and each chunk encoded,
//     sealed and sent through one tracked send.
//   - ResultInbox (result_inbox.h): the step in flight as the transport's
//     threads see it: results placed and filed, aborts, sends in flight.
//
// Encoding is the tensor's TensorCodecStage (tensor_codec_stage.h): for a
// host tensor transform::EncoderPipeline on the CPU (error feedback as a
// decorator; TensorStep::error_feedback, off by default), for a device
// tensor (TensorStep::device) the CUDA stage of options.device_stages. The
// engine calls only the stage's chunked operations.
//
// A step whose epoch a server aborts (a member left) returns Aborted: the
// caller plans the step again under the new epoch and calls Run again; the
// tensor buffers still hold this worker's gradient then (results are
// written only when every chunk has arrived), and error feedback residuals
// advance only with a step that succeeded.
//
// A transport failure of an aggregator connection ends the step in flight
// (Unavailable) only when the step pushes to that connection (and so expects
// results from its server): a late report about a server of an earlier epoch,
// or about a connection the step does not use, changes nothing. A failed
// step's status says which aggregator failed, if one did, and whether any of
// its pushes had left (DescribeStepFailure), so the caller knows whether a
// retry under the same epoch is safe.
//
// Thread safety: Run, Begin, Add, Finish, Cancel and open() are called from
// one thread at a time (the "Run thread"; one step at a time per engine);
// address(), AbortEpochsBefore, AbortStep and inbox() may be called from any
// thread. Results arrive on the transport's progress thread, which only
// files them (ResultInbox); decoding runs on the Run thread (and the codec
// pool).
#ifndef GIFT_WORKER_ENGINE_PUSH_PULL_ENGINE_H_
#define GIFT_WORKER_ENGINE_PUSH_PULL_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transport/transport.h"
#include "worker/engine/result_inbox.h"
#include "worker/engine/step_failure.h"
#include "worker/engine/step_plan.h"
#include "worker/engine/step_route.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {

struct ChunkSlot;
class ChunkSender;
class NodeLeaderRoute;
class ServerRoute;
class TensorBufferCache;
class TensorBuffers;

struct PushPullEngineOptions {
  codec::CodecOptions codec_options = {};  // the pool is not owned
  absl::Duration timeout = absl::Seconds(60);
  // The stage of device tensors (worker/cuda/device_codec_stage.h), set only
  // by builds with CUDA; null: a device tensor is refused (Unimplemented).
  DeviceStageFactory device_stages = nullptr;
};

class PushPullEngine {
 public:
  // Frees buffers of a (tensor, spec) that no step used for this many runs.
  static constexpr uint64_t kEvictAfterRuns = 256;

  static absl::StatusOr<std::unique_ptr<PushPullEngine>> Create(
      const transport::TransportFactory& make_transport, const PushPullEngineOptions& options = {});
  // Waits (up to the timeout) for pushes in flight to complete.
  ~PushPullEngine();

  // Where servers send results.
  std::string address() const;

  // Runs one step as described above. Errors: InvalidArgument (a bad plan:
  // shapes, chunk coverage, a tensor's push spec), Unavailable (a server cannot be reached,
  // or the previous step's pushes from the same buffers did not complete
  // within the timeout),
  // Aborted (a server aborted the step's epoch), DeadlineExceeded (no
  // complete result within the timeout), DataLoss / InvalidArgument (a
  // malformed result). The buffers are written only on success.
  absl::StatusOr<StepReport> Run(const StepPlan& plan);

  // The same step, incrementally (Run is Begin + Add(all, by tensor id) +
  // Finish): Begin opens the step of `step` (its tensors must be empty);
  // each Add plans nothing, it encodes and pushes its tensors at once, in
  // the order given, and returns without waiting for results (those that
  // arrive meanwhile are decoded during later Adds or in Finish); Finish
  // waits for the results of every added tensor and writes them back.
  // Workers may add a step's tensors in different orders and batches: a
  // server completes a chunk once every rank pushed it, and no Add waits
  // for a result, so every worker eventually pushes every chunk and nobody
  // deadlocks. Results are bit-identical to Run's (same payloads, same RNG
  // keys, sums in rank order). An error of Add or Finish ends the step
  // (nothing is written; Run's errors); Cancel ends an open step without
  // writing anything. Add's tensors' buffers must stay valid and unchanged
  // until the step ends. FailedPrecondition: Begin while a step is open,
  // Add / Finish with none open.
  absl::Status Begin(const StepPlan& step);
  absl::Status Add(absl::Span<const TensorStep> tensors);
  absl::StatusOr<StepReport> Finish();
  void Cancel();
  // Whether a step is open (Run thread only).
  bool open() const;

  // Aborts the step in flight, if its epoch is below `epoch` (Run returns
  // Aborted with `why`): the cluster moved to a new epoch, and servers that
  // switched to it refuse the step's pushes. May be called from any thread;
  // does nothing when no step is in flight.
  void AbortEpochsBefore(uint64_t epoch, absl::string_view why);
  // Aborts the step in flight, whatever its epoch: Run / Finish return
  // `why` (not OK). May be called from any thread; does nothing when no
  // step is in flight or it is already aborted.
  void AbortStep(absl::Status why);

  // What arrived and what failed, for diagnostics (its counters; any
  // thread).
  const ResultInbox& inbox() const { return inbox_; }

  // Send arenas renewed because a send of an earlier step from them, to a
  // server that the step in flight no longer uses, did not complete
  // (AwaitSendBuffers). Any thread.
  uint64_t stalled_send_arenas_renewed() const {
    return stalled_send_arenas_renewed_.load(std::memory_order_relaxed);
  }
  // Those arenas freed again, once every send from them had ended (checked
  // when a later step's send buffers are free). Any thread.
  uint64_t stalled_send_arenas_freed() const {
    return stalled_send_arenas_freed_.load(std::memory_order_relaxed);
  }

  // Bytes held by error feedback residuals (each tensor's current and
  // pending residual, FP32), as of the end of the last Run. Any thread.
  uint64_t error_feedback_bytes() const;

 private:
  explicit PushPullEngine(const PushPullEngineOptions& options);
  // Ends the open step with `s`, which is given the step's StepFailureInfo.
  absl::Status FailStep(absl::Status s);
  RunningStep running() const {
    return {.plan = open_plan_, .run = runs_, .buffers = step_buffers_, .peers = step_peers_};
  }
  // Decodes one arrived chunk into its tensor's sum; inverse-transforms the
  // tensor when it was the last.
  absl::Status DecodeArrived(ChunkSlot& slot);
  // Decodes whatever has arrived (with `wait`, first waits until `deadline`
  // for something to happen: ResultInbox::Take), then lets the route send
  // what became ready. False on timeout.
  absl::StatusOr<bool> DrainArrivals(bool wait, absl::Time deadline);
  // Waits until no send of an earlier step holds the buffers of `slots`
  // (their payloads are rewritten next); Unavailable after
  // options_.timeout. A send still in flight after kStalledSendGrace to a
  // peer this step does not use went to a server of an ended epoch, stopped
  // or cut off (a live one takes it in far less): its tensor moves to a
  // fresh send arena (TensorBuffers::RenewSendArena), and the send goes on
  // from the old one, untouched, until the server takes it or fails. Its
  // connection stays: closing it would also cut that server's way back to
  // this worker if it resumes (seen in the soak).
  absl::Status AwaitSendBuffers(absl::Span<ChunkSlot* const> slots);
  // Frees the renewed arenas of the step's tensors whose left-behind sends
  // have all ended.
  void FreeRetiredArenas();
  static constexpr absl::Duration kStalledSendGrace = absl::Milliseconds(250);
  // Ends the step in flight (late results become strays), grows the result
  // slots that were too small, frees buffers unused for long.
  void EndStep();

  const PushPullEngineOptions options_;
  // Declared before the transport, whose threads call into it.
  ResultInbox inbox_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<ChunkSender> sender_;
  std::unique_ptr<TensorBufferCache> buffers_;
  std::unique_ptr<ServerRoute> server_route_;
  std::unique_ptr<NodeLeaderRoute> node_route_;

  // The open step (Run thread): between Begin and its end.
  bool open_ = false;
  StepRoute* route_ = nullptr;  // server_route_ or node_route_
  StepPlan open_plan_;          // its tensors so far
  StepReport open_report_;
  absl::flat_hash_set<uint64_t> open_ids_;                       // tensor ids added
  std::vector<std::vector<dataplane::ChunkShape>> step_shapes_;  // by tensor
  std::vector<std::vector<transport::PeerId>> step_peers_;       // by tensor
  std::vector<TensorBuffers*> step_buffers_;                     // by tensor
  std::vector<ChunkSlot*> step_chunks_;                          // every chunk
  std::vector<ChunkSlot*> draining_;                             // taken from the inbox
  uint64_t runs_ = 0;
  std::atomic<uint64_t> stalled_send_arenas_renewed_{0};
  std::atomic<uint64_t> stalled_send_arenas_freed_{0};
  // The (world_size, worker_set) of the last plan run; nullopt before the first.
  std::optional<std::pair<uint32_t, uint64_t>> world_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_PUSH_PULL_ENGINE_H_
