// The reduction state of one aggregator shard (gift-server): it collects the
// workers' encoded pushes per (step, tensor, chunk), and when every rank of
// the epoch has contributed, sums them in FP32, scales by 1/P and re-encodes
// the average with the pull codec, once, for all workers.
//
// Rules (docs/design.md section 6.3):
//   - a push is accepted only for the current epoch, from a rank below its
//     world size, for a chunk this shard owns, with the chunk's shape;
//   - each rank counts once per (step, chunk) (a duplicate is refused); a
//     node sum (kNodePush, docs/design.md section 6.7) counts for every
//     rank of its sender's node group, and a contribution overlapping ranks
//     already counted is refused (node_coverage.h); the average is always
//     over the world size;
//   - all pushes of a (step, chunk) carry one basis version (a push with
//     another version is refused: versions are never mixed);
//   - a new epoch drops every incomplete chunk of the old one and reports
//     them, so the workers can be told to re-send under the new epoch;
//   - when a step of a chunk completes, the chunk's open earlier steps are
//     dropped (superseded): every rank pushed the later step, so every rank
//     is done with the earlier ones, and what a rank abandoned (a step that
//     failed or timed out after some ranks pushed it) holds no memory and no
//     drain until the next epoch; steps are counted (superseded_chunks);
//   - a push that arrives before this shard knows its epoch (a worker saw
//     the coordinator's new epoch first) or its chunk (a tensor registered
//     moments ago) is deferred, not refused, and replayed when SetEpoch or
//     AddChunks installs what it needs; a deferred push whose epoch ends
//     first is refused then. Deferred bytes are bounded
//     (max_deferred_bytes).
//   - results are encoded with the tensor's pull spec (SetTensorPullSpecs,
//     else SetPullSpec's; both follow the policy), except that FP32 pushes
//     get an FP32 result: an exact reduction is never rounded on its way
//     back. The payload names its format, so workers decode any of them.
//
// Determinism: the payloads are kept until the last rank arrives and then
// reduced in rank order (codec::ReduceEncodedBlocked, bit for bit
// codec::ReduceEncoded), so the result's bits do not depend on arrival
// order, and every worker receives the same bytes. The cost is holding P
// compressed chunks (a quarter of FP32 size each for FP8) per incomplete
// chunk. Stochastic rounding of results uses dataplane::ChunkRngKey(tensor,
// chunk, step, kResultRngRank): every chunk draws its own stream.
//
// Memory (steady state allocates nothing large): every (chunk, rank) has a
// receive slot whose capacity is kept across steps (grown on first use);
// PlacePush hands the transport a slot to land a push in (no copy), and
// AcceptPlaced parses it in place. A completed chunk becomes a ReductionJob;
// Reduce encodes the result in place into one of the chunk's reusable send
// buffers (reserved while any ChunkResult copy of it lives, i.e. until every
// send of it completed; a second buffer is used when the previous result is
// still in flight). Long-lived buffers are registered with the transport
// (options.register_memory). Deferred pushes and AddPush allocate (rare
// paths and tests).
//
// Parts: reducer_slots.h (the chunks' steps and slots, and ending them when
// an epoch does or a later step supersedes them), incomplete_steps.h (which
// ranks the steps that wait or were aborted missed), step_reduction.h (the sum and re-encoding of a completed
// step), deferred_pushes.h (the pushes held for an epoch or chunk).
//
// Thread safety: thread-safe. Accept* store and return a job without
// reducing; Reduce runs on any thread, concurrently with everything else
// (the shard runs it on its pool). AddPush reduces a completed chunk on the
// calling thread. PlacePush and Accept* never block on the transport (they
// run on its progress thread); Reduce, SetEpoch and AddChunks may.
#ifndef GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_
#define GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_shape.h"
#include "server/aggregator/deferred_pushes.h"
#include "server/aggregator/incomplete_steps.h"
#include "server/aggregator/node_coverage.h"
#include "server/aggregator/reusable_buffer.h"

namespace gift::server {

using dataplane::ChunkShape;

// (tensor id, chunk index).
using ChunkId = std::pair<uint64_t, uint32_t>;

struct ChunkReducerOptions {
  codec::CodecSpec pull_spec;              // how results are encoded
  codec::CodecOptions codec_options = {};  // the pool is not owned
  codec::PayloadLimits payload_limits = {};
  // Pushes held for an epoch or chunk not known yet; beyond this a push is
  // refused (ResourceExhausted).
  uint64_t max_deferred_bytes = uint64_t{256} << 20;
  // Registers receive slots and result buffers with the transport (never
  // called on its progress thread); null registers nothing.
  RegisterMemoryFn register_memory;
};

struct ReducedChunk {
  dataplane::ChunkHeader header;  // kind kResult; rank = ranks summed
  std::vector<uint8_t> payload;   // the encoded average
  uint64_t elements = 0;          // of the chunk
  double seconds = 0;             // the reduction and re-encoding took
};

// A result encoded in one of its chunk's reusable send buffers. The buffer
// stays reserved (not reused for a later result) while any copy of `buffer`
// lives: keep one per send in flight.
struct ChunkResult {
  dataplane::ChunkHeader header;  // kind kResult; rank = ranks summed
  std::shared_ptr<const ReusableBuffer> buffer;
  uint64_t elements = 0;
  double seconds = 0;
  absl::Span<const uint8_t> payload() const { return buffer->span(); }
};

namespace reducer_internal {
struct ChunkState;
struct Slot;
struct StepInputs;
}  // namespace reducer_internal

// The inputs of a chunk whose every rank arrived, claimed for one Reduce.
// Move-only; dropping it without Reduce returns nothing to the chunk (its
// slots are freed).
class ReductionJob {
 public:
  ReductionJob(ReductionJob&&) noexcept;
  ReductionJob& operator=(ReductionJob&&) noexcept;
  ~ReductionJob();
  const dataplane::ChunkHeader& header() const { return header_; }

 private:
  friend class ChunkReducer;
  ReductionJob() = default;
  dataplane::ChunkHeader header_;  // the completing push's
  ChunkShape shape_;
  codec::CodecSpec pull_spec_;
  std::shared_ptr<reducer_internal::ChunkState> chunk_;
  std::unique_ptr<reducer_internal::StepInputs> inputs_;
};

// What installing an epoch (or chunks) did besides installing it.
struct EpochUpdate {
  // A kAbort header (status kAborted) for every incomplete chunk of the
  // previous epoch, which was dropped.
  std::vector<dataplane::ChunkHeader> aborted;
  // The same chunks by step, with the ranks each step missed, and the epoch
  // they belonged to (SetEpoch only).
  IncompleteSteps aborted_steps;
  uint64_t aborted_epoch = 0;
  // Chunks that deferred pushes completed once replayed.
  std::vector<ReducedChunk> completed;
  // Deferred pushes that were refused on replay (e.g. their epoch ended
  // before this shard learned it), with the reason.
  std::vector<absl::Status> refused;
};

class ChunkReducer {
 public:
  // InvalidArgument on an invalid pull spec.
  static absl::StatusOr<std::unique_ptr<ChunkReducer>> Create(const ChunkReducerOptions& options);

  // Installs a new epoch: its world size, the chunks this shard owns and
  // its node groups (for node sums: node_coverage.h; default: every rank
  // alone);
  // drops the incomplete chunks of the previous epoch and replays the
  // deferred pushes of the new one (see EpochUpdate). An epoch not above the
  // current one is refused (FailedPrecondition) and changes nothing.
  absl::StatusOr<EpochUpdate> SetEpoch(uint64_t epoch, uint32_t world_size,
                                       absl::flat_hash_map<ChunkId, ChunkShape> chunks,
                                       NodeGroups nodes = {});

  // Adds chunks this shard owns within the current epoch (tensors registered
  // after it began) and replays the pushes deferred for them. A chunk
  // already known must keep its shape (InvalidArgument otherwise, and
  // nothing changes); FailedPrecondition when `epoch` is not the current one.
  absl::StatusOr<EpochUpdate> AddChunks(uint64_t epoch,
                                        const absl::flat_hash_map<ChunkId, ChunkShape>& chunks);

  // The encoding of results completed from now on (InvalidArgument on an
  // invalid spec, and nothing changes).
  absl::Status SetPullSpec(const codec::CodecSpec& spec);
  codec::CodecSpec pull_spec() const;
  // Per-tensor result encodings (the policy's per-tensor pull codecs), and
  // per basis version ones (BasisVersion.pull_codec: the owner's choice under
  // the fidelity target, keyed (tensor, version) as a chunk header names
  // them), replacing the previous ones; a chunk's result takes its version's
  // codec, else its tensor's, else pull_spec(). For results completed from
  // now on. InvalidArgument naming the tensor on an invalid spec, and
  // nothing changes.
  using VersionKey = std::pair<uint64_t, uint64_t>;  // (tensor id, basis version)
  absl::Status SetTensorPullSpecs(
      absl::flat_hash_map<uint64_t, codec::CodecSpec> specs,
      absl::flat_hash_map<VersionKey, codec::CodecSpec> version_specs = {});
  // The encoding of the next results of `tensor_id`'s chunks of `version`.
  codec::CodecSpec pull_spec(uint64_t tensor_id, uint64_t version = 0) const;

  // Zero-copy receive: a buffer of exactly `payload_bytes` for the payload
  // of an arriving push (the rank's slot of its chunk and step), reserved
  // until AcceptPlaced runs with it or the epoch ends; an empty span when
  // the push cannot go to a slot (unknown epoch or chunk, bad rank, the
  // slot taken: a duplicate): the caller then passes its bytes to Accept,
  // which defers or refuses it.
  absl::Span<uint8_t> PlacePush(const dataplane::ChunkHeader& header, size_t payload_bytes);

  // Validates and stores one push (`header.kind` kPush) whose payload
  // PlacePush placed at `placed`. Returns the job when this push completed
  // its chunk, else nullopt. Errors, with nothing stored (the slot is free
  // again): FailedPrecondition (an ended epoch, mixed basis version, a
  // placement the epoch change orphaned), InvalidArgument (kind, world
  // size, rank, shape, malformed payload, a span PlacePush did not give),
  // DataLoss (payload checksum), NotFound (chunk not owned). `checksum`:
  // kCoveredByMac when the caller verified the chunk's MAC over these bytes.
  absl::StatusOr<std::optional<ReductionJob>> AcceptPlaced(
      const dataplane::ChunkHeader& header, absl::Span<const uint8_t> placed,
      codec::ChecksumCheck checksum = codec::ChecksumCheck::kVerify);

  // Gives back a slot PlacePush handed out, storing nothing: for a push the
  // caller refuses before AcceptPlaced (its MAC did not verify).
  void DiscardPlaced(const dataplane::ChunkHeader& header, absl::Span<const uint8_t> placed);

  // As AcceptPlaced for bytes the caller owns (copied into the slot), and
  // deferral (see the rules above; nullopt); also AlreadyExists (the rank
  // already pushed this chunk, or its push is being placed) and
  // ResourceExhausted (too many deferred bytes).
  absl::StatusOr<std::optional<ReductionJob>> Accept(
      const dataplane::ChunkHeader& header, std::vector<uint8_t> payload,
      codec::ChecksumCheck checksum = codec::ChecksumCheck::kVerify);

  // Sums the job's inputs in rank order, scales by 1/P and encodes the
  // average (pull spec, or FP32 when every push was FP32) into a send buffer
  // of the chunk. Any thread; concurrent calls are fine. InvalidArgument on
  // a non-finite sum.
  absl::StatusOr<ChunkResult> Reduce(ReductionJob job);

  // Accept, then Reduce a completed chunk on the calling thread, returning a
  // copy of the result (errors as Accept and Reduce).
  absl::StatusOr<std::optional<ReducedChunk>> AddPush(const dataplane::ChunkHeader& header,
                                                      std::vector<uint8_t> payload);

  // From now on PlacePush declines and Accept* refuse (Unavailable): no new
  // job is made. For shutdown, before ReleaseMemory(close).
  void StopAccepting();

  // Frees retired buffers and their registrations (Drain), or, with
  // close = true, unregisters every buffer and stops registering and
  // taking pushes (PlacePush declines, Accept is Unavailable): call before
  // the transport goes, with no Reduce running and no send of a result in
  // flight. Never on the transport's progress thread.
  void ReleaseMemory(bool close = false);

  // Whether SetEpoch has installed an epoch; epoch() is 0 until then.
  bool has_epoch() const;
  uint64_t epoch() const;
  size_t pending_chunks() const;
  uint64_t pending_bytes() const;
  size_t deferred_pushes() const;
  // The (step, chunk)s waiting for ranks, by step, with the ranks missing.
  IncompleteSteps incomplete_steps() const;
  // When the last push was stored (InfinitePast before the first).
  absl::Time last_push() const;
  // (step, chunk)s some rank pushed that a later step of their chunk
  // superseded (see the rules above).
  uint64_t superseded_chunks() const;

 private:
  using ChunkState = reducer_internal::ChunkState;
  using StepInputs = reducer_internal::StepInputs;

  explicit ChunkReducer(const ChunkReducerOptions& options);
  // The checks every accepted push passes under the lock: epoch, world
  // size, rank, owned chunk, shape. Returns the chunk.
  absl::StatusOr<ChunkState*> CheckPushLocked(const dataplane::ChunkHeader& header,
                                              const ChunkShape& got) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The placed slot of `header` holding `placed` (and its chunk), or why
  // not: FailedPrecondition for an orphan (freed here), InvalidArgument for
  // bytes PlacePush did not hand out.
  absl::StatusOr<reducer_internal::Slot*> TakePlacedLocked(const dataplane::ChunkHeader& header,
                                                           absl::Span<const uint8_t> placed,
                                                           ChunkState** chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the parsed push of `slot_rank` of `inputs` (its bytes already in
  // the slot): basis version, counts; the job when complete.
  // `ranks`: how many ranks the push counts for (CoverLocked).
  absl::StatusOr<std::optional<ReductionJob>> StoreLocked(const dataplane::ChunkHeader& header,
                                                          ChunkState& chunk, StepInputs& inputs,
                                                          const codec::EncodedView& view,
                                                          uint32_t ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a push must wait for an epoch or chunk this shard does not know
  // yet.
  bool MustDeferLocked(const dataplane::ChunkHeader& header) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Takes the deferred pushes that can be decided now (those of the current
  // epoch whose chunk is known, and those of ended epochs) and replays them
  // into `update`.
  void ReplayDeferred(EpochUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);

  const ChunkReducerOptions options_;
  mutable absl::Mutex mu_;
  bool has_epoch_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t world_size_ ABSL_GUARDED_BY(mu_) = 0;
  NodeGroups nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChunkId, std::shared_ptr<ChunkState>> chunks_ ABSL_GUARDED_BY(mu_);
  size_t pending_chunks_ ABSL_GUARDED_BY(mu_) = 0;  // open steps some rank pushed
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t superseded_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_push_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Slots placed in an epoch that ended before their payload arrived: kept
  // until it does (the transport may still be writing them).
  std::vector<ReusableBuffer> orphans_ ABSL_GUARDED_BY(mu_);
  const std::shared_ptr<BufferRegistry> registry_;
  // After ReleaseMemory(close): no more pushes; the buffers, unregistered,
  // live until the reducer does.
  struct Closed {
    absl::flat_hash_map<ChunkId, std::shared_ptr<ChunkState>> chunks;
    std::vector<ReusableBuffer> orphans;
  };
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Closed> closed_buffers_ ABSL_GUARDED_BY(mu_);
  codec::CodecSpec pull_spec_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, codec::CodecSpec> tensor_pull_specs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<VersionKey, codec::CodecSpec> version_pull_specs_ ABSL_GUARDED_BY(mu_);
  // The lookup above, under mu_.
  codec::CodecSpec PullSpecLocked(uint64_t tensor_id, uint64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DeferredPushes deferred_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_
