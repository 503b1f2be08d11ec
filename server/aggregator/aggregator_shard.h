// One aggregator shard on the wire: it receives the workers' chunk pushes from
// a Transport, reduces them with a ChunkReducer, and sends each result (or
// an abort, when the epoch ends first) back to every worker of the epoch.
// The daemon (gift-server) feeds it the epochs it learns from the
// coordinator; the shard knows nothing of gRPC.
//
//   auto shard = AggregatorShard::Create({.pull_spec = bf16}, &transport_factory);
//   GIFT_RETURN_IF_ERROR(shard->SetEpoch({.epoch = 4, .workers = {addr0, addr1},
//                                         .chunks = {...}}));
//
// Messages that fail validation are dropped, counted by reason
// (rejections()), and reported through the optional on_reject callback (for
// logs); they never stop the shard.
//
// Thread safety: thread-safe. Pushes are handled on the transport's progress
// thread; a completed chunk's reduction runs there too.
#ifndef GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_
#define GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/connection_cache.h"
#include "common/transport/transport.h"
#include "server/aggregator/chunk_reducer.h"

namespace gift::server {

struct ShardEpoch {
  uint64_t epoch = 0;
  // The workers' transport addresses, by rank (size = world size).
  std::vector<std::string> workers;
  // The chunks this shard reduces in this epoch.
  absl::flat_hash_map<ChunkId, ChunkShape> chunks;
  // The policy's pull codec, when it names one; else the shard keeps its own.
  std::optional<codec::CodecSpec> pull_spec;
};

struct AggregatorShardOptions {
  ChunkReducerOptions reducer;
  // Called (on the progress thread) for every dropped message.
  std::function<void(const absl::Status& why)> on_reject;
};

// Builds the shard's transport with the handlers it is given (e.g.
// CreateUcxTransport, or CreateInprocTransport in tests).
using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<transport::Transport>>(
    transport::TransportHandlers handlers)>;

class AggregatorShard {
 public:
  static absl::StatusOr<std::unique_ptr<AggregatorShard>> Create(
      const AggregatorShardOptions& options, const TransportFactory& make_transport);
  ~AggregatorShard();

  // The address workers push to.
  std::string address() const;

  // Installs an epoch: connects to its workers and tells the workers of the
  // previous epoch which of their chunks were aborted. Fails when an epoch is
  // not above the current one or a worker cannot be reached (Unavailable;
  // the shard then keeps the new epoch and reduces nothing for unreachable
  // ranks until the next epoch).
  absl::Status SetEpoch(const ShardEpoch& epoch);

  // Applies `epoch`: SetEpoch when its number is above the current one;
  // for the current epoch, adds its chunks (tensors registered meanwhile).
  // Older epochs are ignored (OK).
  absl::Status Apply(const ShardEpoch& epoch);
  uint64_t epoch() const { return reducer_->epoch(); }
  size_t pending_chunks() const { return reducer_->pending_chunks(); }
  size_t deferred_pushes() const { return reducer_->deferred_pushes(); }

  struct Counters {
    uint64_t pushes_accepted = 0;
    uint64_t chunks_completed = 0;
    uint64_t chunks_aborted = 0;
    uint64_t result_bytes_sent = 0;
    uint64_t send_failures = 0;
    uint64_t push_bytes_received = 0;  // payload bytes of accepted pushes
    double reduce_seconds = 0;         // reducing + re-encoding completed chunks
    uint64_t reduced_bytes = 0;        // FP32 bytes of the completed chunks
  };
  Counters counters() const;
  // Dropped messages by absl status code name ("FAILED_PRECONDITION" ...).
  std::map<std::string, uint64_t> rejections() const;

 private:
  explicit AggregatorShard(AggregatorShardOptions options) : options_(std::move(options)) {}

  void OnMessage(transport::Message message);
  void Reject(const absl::Status& why);
  void CountCompletedLocked(const ReducedChunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends header + payload to every worker of the current epoch (or to
  // `peers`).
  void Broadcast(const dataplane::ChunkHeader& header,
                 std::shared_ptr<std::vector<uint8_t>> payload);
  void Broadcast(const dataplane::ChunkHeader& header,
                 std::shared_ptr<std::vector<uint8_t>> payload,
                 const std::vector<transport::PeerId>& peers);
  // Counts the refusals of an epoch update and sends its completed chunks.
  void Deliver(EpochUpdate update);

  const AggregatorShardOptions options_;
  std::unique_ptr<ChunkReducer> reducer_;
  std::unique_ptr<transport::Transport> transport_;

  mutable absl::Mutex mu_;
  std::vector<transport::PeerId> worker_peers_ ABSL_GUARDED_BY(mu_);  // by rank
  // Connections by worker address, kept across epochs; a connection is
  // dropped when its peer fails (a worker that exits).
  transport::ConnectionCache connections_;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> rejections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_
