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
//     them, so the workers can be told to re-send under the new epoch.
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
};

struct ReducedChunk {
  dataplane::ChunkHeader header;  // kind kResult; rank = ranks summed
  std::vector<uint8_t> payload;   // the encoded average
};

class ChunkReducer {
 public:
  // InvalidArgument on an invalid pull spec.
  static absl::StatusOr<std::unique_ptr<ChunkReducer>> Create(const ChunkReducerOptions& options);

  // Installs a new epoch: its world size and the chunks this shard owns.
  // Returns a kAbort header (status kAborted) for every incomplete chunk of
  // an earlier epoch, which is dropped. An epoch not above the current one
  // is refused (FailedPrecondition) and changes nothing.
  absl::StatusOr<std::vector<dataplane::ChunkHeader>> SetEpoch(
      uint64_t epoch, uint32_t world_size, absl::flat_hash_map<ChunkId, ChunkShape> chunks);

  // Adds chunks this shard owns within the current epoch (tensors registered
  // after it began). A chunk already known must keep its shape
  // (InvalidArgument otherwise, and nothing changes); FailedPrecondition when
  // `epoch` is not the current one.
  absl::Status AddChunks(uint64_t epoch, const absl::flat_hash_map<ChunkId, ChunkShape>& chunks);

  // Validates and stores one push (`header.kind` kPush). Returns the reduced
  // chunk when this push completed it, else nullopt. Errors, with nothing
  // stored: FailedPrecondition (other epoch, mixed basis version, no epoch
  // yet), NotFound (a chunk this shard does not own), InvalidArgument (kind,
  // world size, rank, shape, malformed payload), DataLoss (payload
  // checksum), AlreadyExists (the rank already pushed this chunk).
  absl::StatusOr<std::optional<ReducedChunk>> AddPush(const dataplane::ChunkHeader& header,
                                                      std::vector<uint8_t> payload);

  // Whether SetEpoch has installed an epoch; epoch() is 0 until then.
  bool has_epoch() const;
  uint64_t epoch() const;
  size_t pending_chunks() const;
  uint64_t pending_bytes() const;

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

  explicit ChunkReducer(const ChunkReducerOptions& options) : options_(options) {}
  absl::StatusOr<ReducedChunk> Reduce(const dataplane::ChunkHeader& last, const ChunkShape& shape,
                                      const std::vector<Contribution>& contributions) const;

  const ChunkReducerOptions options_;
  mutable absl::Mutex mu_;
  bool has_epoch_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t world_size_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ChunkId, ChunkShape> chunks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_CHUNK_REDUCER_H_
