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
// address(), AbortEpochsBefore and stray_messages() may be called from any
// thread. Results arrive on the transport's progress thread, which only
// files them; decoding runs on the Run thread (and the codec pool).
#ifndef GIFT_WORKER_PUSH_PULL_ENGINE_H_
#define GIFT_WORKER_PUSH_PULL_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_mac.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transform/gradient_transform.h"
#include "common/transport/connection_cache.h"
#include "common/transport/transport.h"
#include "worker/node_group.h"
#include "worker/step_failure.h"
#include "worker/tensor_codec_stage.h"

namespace gift::worker {

struct ChunkSlot;
class TensorBuffers;

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
  // rank, as without a group. Null: every chunk is pushed directly.
  // Not yet with authentication (Begin: Unimplemented): workers hold no
  // keys of each other.
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
};

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
      const transport::TransportFactory& make_transport,
      const PushPullEngineOptions& options = {});
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

  // Messages received that belonged to no step in flight (late, duplicate
  // or foreign), for diagnostics.
  uint64_t stray_messages() const;
  // Aggregator connections the transport reported failed, and how many of
  // those ended a step (the others were not used by the step in flight);
  // any thread.
  uint64_t peer_failures() const;
  uint64_t peer_failures_that_aborted() const;
  // Results and aborts of the step in flight dropped by authentication, by
  // dataplane::AuthFailureName (every reason present); any thread.
  std::map<std::string, uint64_t> auth_failures() const;

  // Bytes held by error feedback residuals (each tensor's current and
  // pending residual, FP32), as of the end of the last Run. Any thread.
  uint64_t error_feedback_bytes() const;

 private:
  struct Inflight {
    uint64_t epoch = 0;
    uint64_t step = 0;
    uint64_t run = 0;  // runs_ at Begin: tells a retry of (epoch, step) apart
    // The aggregator connections the step pushes to, with their addresses.
    absl::flat_hash_map<transport::PeerId, std::string> peers;
    bool pushed = false;  // a push was handed to the transport
    // (tensor id, chunk index) -> the chunk's slot, for the step's chunks.
    absl::flat_hash_map<std::pair<uint64_t, uint32_t>, ChunkSlot*> slots;
    std::vector<ChunkSlot*> ready;  // arrived, not yet decoded
    // The plan's keys (null: authentication off).
    std::shared_ptr<const dataplane::EpochKeys> keys;
    size_t remaining = 0;  // chunks not arrived
    absl::Status aborted;  // non-OK once a server aborted the step
  };
  // The buffers of one tensor are keyed by its id and push spec (a measured
  // step's FP32 exchange keeps its own).
  using BuffersKey = std::tuple<uint64_t, codec::Format, codec::Scaling, uint32_t, codec::Rounding>;

  explicit PushPullEngine(const PushPullEngineOptions& options);
  void OnMessage(transport::Message message);
  // The transport reported `peer` failed (progress thread).
  void OnPeerFailure(transport::PeerId peer, const absl::Status& why);
  // Ends the open step with `s`, which is given the step's StepFailureInfo.
  absl::Status FailStep(absl::Status s);
  absl::Span<uint8_t> PlacePayload(absl::Span<const uint8_t> header, size_t bytes);
  absl::StatusOr<transport::PeerId> PeerFor(const std::string& address);
  // The buffers for plan.tensors[i], built or rebuilt as needed.
  absl::StatusOr<TensorBuffers*> BuffersFor(const StepPlan& plan, size_t i,
                                            absl::Span<const dataplane::ChunkShape> shapes);
  // Decodes one arrived chunk into its tensor's sum; inverse-transforms the
  // tensor when it was the last.
  absl::Status DecodeArrived(const StepPlan& plan, ChunkSlot& slot, StepReport& report);
  // Decodes whatever has arrived; with `wait`, first waits (until `deadline`)
  // for an arrival, the end of the step or an abort. False on timeout.
  absl::StatusOr<bool> DrainArrivals(const StepPlan& plan, bool wait, absl::Time deadline,
                                     StepReport& report);
  // Node-local aggregation (push_pull_engine_node.cc). Begin's part: the
  // group's sums reset, contributions of ended epochs dropped.
  absl::Status BeginNodeStep(const StepPlan& step);
  // Add's part for chunk `c` of plan.tensors[i] (x as Prepare returned):
  // leads it, or sends it in FP32 to its leader (`peer`).
  absl::Status RouteNodeChunk(const StepPlan& plan, size_t i, size_t c, const float* x,
                              transport::PeerId peer, StepReport& report);
  // Files the members' contributions that arrived and pushes the sums of
  // the led chunks whose every contribution is in.
  absl::Status PushNodeSums(const StepPlan& plan, StepReport& report);
  // OnMessage's part for a kNodeMember.
  void FileNodeContributionLocked(const dataplane::ChunkHeader& header, transport::Message& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends header + payload (owned by the send until it completes); a failed
  // send fails the step in flight.
  absl::Status SendOwned(transport::PeerId peer, std::vector<uint8_t> header,
                         std::shared_ptr<const std::vector<uint8_t>> payload, uint64_t epoch,
                         uint64_t step);
  // Ends the step in flight (late results become strays), grows the result
  // slots that were too small, frees buffers unused for long.
  void EndStep();

  const PushPullEngineOptions options_;
  std::unique_ptr<transport::Transport> transport_;

  // Run thread only.
  absl::flat_hash_map<BuffersKey, std::unique_ptr<TensorBuffers>> buffers_;
  std::vector<std::vector<dataplane::ChunkShape>> step_shapes_;  // by tensor, this step
  std::vector<std::vector<transport::PeerId>> step_peers_;       // by tensor, this step
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, ChunkSlot*>
      step_slots_;                                       // next Inflight::slots
  std::vector<std::unique_ptr<TensorBuffers>> retired_;  // replaced while busy
  std::vector<TensorBuffers*> step_buffers_;             // by tensor, this step
  std::vector<ChunkSlot*> step_chunks_;                  // every chunk, this step
  std::vector<ChunkSlot*> draining_;                     // swapped with inflight_.ready
  bool open_ = false;                                    // between Begin and the step's end
  StepPlan open_plan_;                                   // the open step; its tensors so far
  StepReport open_report_;
  absl::flat_hash_set<uint64_t> open_ids_;  // tensor ids added to the open step
  uint64_t runs_ = 0;
  // The (world_size, worker_set) of the last plan run; nullopt before the first.
  std::optional<std::pair<uint32_t, uint64_t>> world_;
  std::atomic<uint64_t> error_feedback_bytes_{0};

  mutable absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  Inflight inflight_ ABSL_GUARDED_BY(mu_);
  uint64_t stray_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections reported failed (ids are never reused, and a worker sees few
  // failures, so they are kept): a step that picks one up from the cache
  // just before its report is still ended by it.
  absl::flat_hash_set<transport::PeerId> failed_peers_ ABSL_GUARDED_BY(mu_);
  uint64_t peer_failures_that_aborted_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> auth_failures_ ABSL_GUARDED_BY(mu_);
  uint64_t sends_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Node-local aggregation: the led chunks' sums (Run thread), the
  // members' contributions received and not yet filed (of this step or a
  // later one), and the connections to other workers (their failures do
  // not fail a step: see StepPlan::node).
  NodeSums node_sums_;
  std::vector<float> node_scratch_;
  std::vector<NodeContribution> node_inbox_ ABSL_GUARDED_BY(mu_);
  uint64_t node_inbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t node_arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t node_seen_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<transport::PeerId> node_mate_peers_ ABSL_GUARDED_BY(mu_);
  // Placed buffers not yet delivered -> their slots (possibly of an ended
  // step).
  absl::flat_hash_map<const uint8_t*, ChunkSlot*> outstanding_ ABSL_GUARDED_BY(mu_);
  transport::ConnectionCache connections_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_PUSH_PULL_ENGINE_H_
