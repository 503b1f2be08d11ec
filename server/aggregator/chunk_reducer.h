// The reduction state of one aggregator shard (gift-server): it collects the
// workers' encoded pushes per (step, tensor, chunk), and when every rank of
// the epoch has contributed, sums them in FP32, scales by 1/P and re-encodes
// the average with the pull codec, once, for all workers.
//
// Rules (design note section 3):
//   - a push is accepted only for the current epoch, from a rank below its
//     world size, for a chunk this shard owns, with the chunk's shape;
//   - each rank counts once per (step, chunk) (a duplicate is refused);
//   - all pushes of a (step, chunk) carry one basis version (a push with
//     another version is refused: versions are never mixed);
//   - a new epoch drops every incomplete chunk of the old one and reports
//     them, so the workers can be told to re-send under the new epoch;
//   - a push that arrives before this shard knows its epoch (a worker saw
//     the coordinator's new epoch first) or its chunk (a tensor registered
//     moments ago) is deferred, not refused, and replayed when SetEpoch or
//     AddChunks installs what it needs; a deferred push whose epoch ends
//     first is refused then. Deferred bytes are bounded
//     (max_deferred_bytes).
//   - results are encoded with the pull spec (SetPullSpec follows the
//     policy), except that FP32 pushes get an FP32 result: an exact
//     reduction is never rounded on its way back.
//
// Determinism: the payloads are kept until the last rank arrives and then
// reduced in rank order (codec::ReduceEncoded), so the result's bits do not
// depend on arrival order, and every worker receives the same bytes. The
// cost is holding P compressed chunks (a quarter of FP32 size each for FP8)
// per incomplete chunk.
//
// Thread safety: thread-safe. AddPush runs the reduction of a completed chunk
// on the calling thread, outside the lock, so pushes of different chunks
// proceed in parallel.
#ifndef GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_
#define GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_shape.h"

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
};

struct ReducedChunk {
  dataplane::ChunkHeader header;  // kind kResult; rank = ranks summed
  std::vector<uint8_t> payload;   // the encoded average
  uint64_t elements = 0;          // of the chunk
  double seconds = 0;             // the reduction and re-encoding took
};

// What installing an epoch (or chunks) did besides installing it.
struct EpochUpdate {
  // A kAbort header (status kAborted) for every incomplete chunk of the
  // previous epoch, which was dropped.
  std::vector<dataplane::ChunkHeader> aborted;
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

  // Installs a new epoch: its world size and the chunks this shard owns;
  // drops the incomplete chunks of the previous epoch and replays the
  // deferred pushes of the new one (see EpochUpdate). An epoch not above the
  // current one is refused (FailedPrecondition) and changes nothing.
  absl::StatusOr<EpochUpdate> SetEpoch(uint64_t epoch, uint32_t world_size,
                                       absl::flat_hash_map<ChunkId, ChunkShape> chunks);

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

  // Validates and stores one push (`header.kind` kPush). Returns the reduced
  // chunk when this push completed it, else nullopt (also when the push was
  // deferred: see the rules above). Errors, with nothing stored:
  // FailedPrecondition (an ended epoch, mixed basis version), InvalidArgument
  // (kind, world size, rank, shape, malformed payload), DataLoss (payload
  // checksum), AlreadyExists (the rank already pushed this chunk),
  // ResourceExhausted (too many deferred bytes).
  absl::StatusOr<std::optional<ReducedChunk>> AddPush(const dataplane::ChunkHeader& header,
                                                      std::vector<uint8_t> payload);

  // Whether SetEpoch has installed an epoch; epoch() is 0 until then.
  bool has_epoch() const;
  uint64_t epoch() const;
  size_t pending_chunks() const;
  uint64_t pending_bytes() const;
  size_t deferred_pushes() const;

 private:
  // One rank's push: its bytes and the view ParsePayload returned on arrival,
  // which points into the bytes' heap buffer (moving the vector keeps it).
  struct Contribution {
    std::vector<uint8_t> bytes;  // empty until the rank's push arrives
    codec::EncodedView view;
  };
  struct Pending {
    uint64_t basis_version = 0;
    std::vector<Contribution> contributions;  // by rank
    uint32_t received = 0;
  };
  // (step, tensor id, chunk index).
  using Key = std::tuple<uint64_t, uint64_t, uint32_t>;

  struct Deferred {
    dataplane::ChunkHeader header;
    std::vector<uint8_t> payload;
  };

  explicit ChunkReducer(const ChunkReducerOptions& options)
      : options_(options), pull_spec_(options.pull_spec) {}
  absl::StatusOr<ReducedChunk> Reduce(const dataplane::ChunkHeader& last, const ChunkShape& shape,
                                      const std::vector<Contribution>& contributions,
                                      const codec::CodecSpec& pull_spec) const;
  // Whether a push must wait for an epoch or chunk this shard does not know
  // yet.
  bool MustDeferLocked(const dataplane::ChunkHeader& header) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the deferred pushes that can be decided now (those of the current
  // epoch whose chunk is known, and those of ended epochs) and replays them
  // into `update`.
  void ReplayDeferred(EpochUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);

  const ChunkReducerOptions options_;
  mutable absl::Mutex mu_;
  bool has_epoch_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t world_size_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ChunkId, ChunkShape> chunks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  codec::CodecSpec pull_spec_ ABSL_GUARDED_BY(mu_);
  std::vector<Deferred> deferred_ ABSL_GUARDED_BY(mu_);
  uint64_t deferred_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_
