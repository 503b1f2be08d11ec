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
// Data path: a push's payload is placed by the transport straight into the
// reducer's receive slot (PlacePush) and validated on the progress thread;
// a completed chunk's reduction runs on the shard's own pool
// (reduce_threads), never on the progress thread, and the pool thread sends
// the result from the chunk's reusable send buffer, which stays reserved
// until every worker's send of it completed.
//
// Thread safety: thread-safe.
#ifndef GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_
#define GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_

#include <atomic>
#include <cstdint>
#include <deque>
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
#include "common/base/thread_pool.h"
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
  // Each tensor's pull codec under the policy (policy::ResolveTensorSettings,
  // as the workers resolve their push codecs); tensors absent use the one
  // above. Replaces the shard's previous per-tensor codecs.
  absl::flat_hash_map<uint64_t, codec::CodecSpec> tensor_pull_specs;
};

struct AggregatorShardOptions {
  ChunkReducerOptions reducer;
  // Called for every dropped message (on the progress thread, or on a pool
  // thread for a chunk whose reduction failed).
  std::function<void(const absl::Status& why)> on_reject;
  // Threads reducing completed chunks (at least 1).
  size_t reduce_threads = 1;
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
  // (step, chunk) reductions in flight: waiting for ranks, queued or
  // running on the pool (a result whose sends are still in flight no longer
  // counts).
  size_t pending_chunks() const { return reducer_->pending_chunks() + jobs_in_flight_.load(); }
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
  void CountCompletedLocked(uint64_t elements, double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  using Peers = std::shared_ptr<const std::vector<transport::PeerId>>;  // by rank
  // Sends header + payload to every one of `peers`; `keep_alive` owns the
  // payload's bytes and is held until each send completed.
  void Broadcast(const dataplane::ChunkHeader& header, absl::Span<const uint8_t> payload,
                 std::shared_ptr<const void> keep_alive, const Peers& peers);
  Peers CurrentPeers() const;
  // Queues a completed chunk's reduction on the pool, for `peers`.
  void Schedule(ReductionJob job, Peers peers);
  // On the pool: reduces the oldest queued job and sends its result.
  void RunJob();
  // Counts the refusals of an epoch update and sends its completed chunks.
  void Deliver(EpochUpdate update);

  const AggregatorShardOptions options_;
  std::unique_ptr<ChunkReducer> reducer_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<ThreadPool> pool_;

  struct QueuedJob {
    ReductionJob job;
    Peers peers;
  };
  // Held shared by every OnMessage; the destructor takes it once, after the
  // reducer stopped accepting, so every job made before is queued.
  absl::Mutex receiving_mu_;
  absl::Mutex jobs_mu_;
  bool accepting_jobs_ ABSL_GUARDED_BY(jobs_mu_) = true;
  std::deque<QueuedJob> jobs_ ABSL_GUARDED_BY(jobs_mu_);
  std::atomic<int64_t> sends_in_flight_{0};
  std::atomic<size_t> jobs_in_flight_{0};  // scheduled, not yet sent

  mutable absl::Mutex mu_;
  Peers worker_peers_ ABSL_GUARDED_BY(mu_);
  // Connections by worker address, kept across epochs; a connection is
  // dropped when its peer fails (a worker that exits).
  transport::ConnectionCache connections_;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> rejections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_
