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
// Authentication (options.auth; docs/design.md section 8.2): every
// push must be sealed (common/dataplane/chunk_mac.h) with the key of the
// rank it claims, of its epoch (ShardEpoch::keys); the header tag is
// checked before the payload is placed, the chunk tag before the reducer
// sees the push. A push that fails is dropped, never summed, counted in
// auth_failures() by reason (and in rejections() as UNAUTHENTICATED) and
// reported to on_auth_failure at most once a second (by default) per reason. A push of
// an epoch whose keys the shard does not have yet is held (unverified,
// bounded) until SetEpoch installs them. Results and aborts leave sealed
// with the shard's own key of their epoch. With ShardAuth::kFromFirstEpoch
// (gift-server: the coordinator decides) every push is held until the
// first epoch, whose keys (or their absence) switch authentication on (or
// off); an epoch with keys switches it on for good.
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
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/thread_pool.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transport/connection_cache.h"
#include "common/transport/transport.h"
#include "server/aggregator/chunk_reducer.h"

namespace gift::server {

struct ShardEpoch {
  uint64_t epoch = 0;
  // The workers' transport addresses, by rank (size = world size).
  std::vector<std::string> workers;
  // The workers' nodes (Member.node), by rank, for node sums
  // (node_coverage.h); empty or shorter than `workers`: every rank alone.
  std::vector<std::string> nodes;
  // The chunks this shard reduces in this epoch.
  absl::flat_hash_map<ChunkId, ChunkShape> chunks;
  // The policy's pull codec, when it names one; else the shard keeps its own.
  std::optional<codec::CodecSpec> pull_spec;
  // Each tensor's pull codec under the policy (policy::ResolveTensorSettings,
  // as the workers resolve their push codecs); tensors absent use the one
  // above. Replaces the shard's previous per-tensor codecs.
  absl::flat_hash_map<uint64_t, codec::CodecSpec> tensor_pull_specs;
  // The basis versions that name a pull codec of their own
  // (BasisVersion.pull_codec, committed or proposed), by (tensor, version):
  // ahead of the tensor's codec for that version's chunks.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, codec::CodecSpec> version_pull_specs;
  // With authentication: this server's keys of the epoch (signer: the shard
  // id; peers: the workers' keys by rank). Required once it is on.
  std::shared_ptr<const dataplane::EpochKeys> keys;
};

enum class ShardAuth {
  kOff,             // chunks are neither checked nor sealed; keys are ignored
  kOn,              // every chunk is; an epoch without keys is refused
  kFromFirstEpoch,  // as the epochs' keys say (see above)
};

struct AggregatorShardOptions {
  ChunkReducerOptions reducer;
  // Called for every dropped message (on the progress thread, or on a pool
  // thread for a chunk whose reduction failed).
  std::function<void(const absl::Status& why)> on_reject;
  // Threads reducing completed chunks (at least 1).
  size_t reduce_threads = 1;
  ShardAuth auth = ShardAuth::kOff;
  // A push that failed authentication, the peer it came from and how many
  // failures of the same reason were not reported since the last call (at
  // most one call per auth_report_interval per reason; on the progress
  // thread).
  std::function<void(const absl::Status& why, transport::PeerId from, uint64_t unreported)>
      on_auth_failure;
  absl::Duration auth_report_interval = absl::Seconds(1);
  // A result or abort whose send to a worker failed (that worker will not
  // get it: its step waits until the epoch changes or its step timeout): the
  // worker's rank, the chunk, why, and how many failures were not reported
  // since the last call. At most one call per send_failure_report_interval
  // (on the progress thread or a pool thread). Also counted in
  // Counters::send_failures; a rank unreachable in its epoch counts too.
  std::function<void(uint32_t rank, const dataplane::ChunkHeader& chunk, const absl::Status& why,
                     uint64_t unreported)>
      on_send_failure;
  absl::Duration send_failure_report_interval = absl::Seconds(1);
  // Each step of epoch `epoch` that epoch `by` aborted here, with the ranks
  // this shard still waited for (SetEpoch's thread, after the epoch is in).
  std::function<void(uint64_t epoch, uint64_t by, const IncompleteStep& step)> on_step_aborted;
};

class AggregatorShard {
 public:
  static absl::StatusOr<std::unique_ptr<AggregatorShard>> Create(
      const AggregatorShardOptions& options, const transport::TransportFactory& make_transport);
  ~AggregatorShard();

  // The address workers push to.
  std::string address() const;

  // Installs an epoch: connects to its workers and tells the workers of the
  // previous epoch which of their chunks were aborted (the abort's reason
  // names the ranks the step still waited for here). Fails when an epoch is
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
  // Of the reductions waiting for ranks: by step, the ranks missing.
  IncompleteSteps incomplete_steps() const { return reducer_->incomplete_steps(); }
  // When the last push was stored (InfinitePast before the first).
  absl::Time last_push() const { return reducer_->last_push(); }
  // Reductions queued or running on the pool.
  size_t jobs_in_flight() const { return jobs_in_flight_.load(); }
  // Pushes held for an epoch or chunk not known yet (by the reducer) or for
  // their epoch's keys (authentication).
  size_t deferred_pushes() const;

  struct Counters {
    uint64_t pushes_accepted = 0;
    uint64_t chunks_completed = 0;
    uint64_t chunks_aborted = 0;
    uint64_t chunks_superseded = 0;  // ChunkReducer::superseded_chunks
    uint64_t result_bytes_sent = 0;
    uint64_t send_failures = 0;
    uint64_t push_bytes_received = 0;  // payload bytes of accepted pushes
    double reduce_seconds = 0;         // reducing + re-encoding completed chunks
    uint64_t reduced_bytes = 0;        // FP32 bytes of the completed chunks
  };
  Counters counters() const;
  // Dropped messages by absl status code name ("FAILED_PRECONDITION" ...).
  std::map<std::string, uint64_t> rejections() const;
  // Pushes refused by authentication, by dataplane::AuthFailureName (every
  // reason present, 0 when none).
  std::map<std::string, uint64_t> auth_failures() const;

 private:
  explicit AggregatorShard(AggregatorShardOptions options) : options_(std::move(options)) {}

  void OnMessage(transport::Message message);
  // The checks and the reducer for a parsed message (OnMessage, and held
  // pushes once their keys came).
  void Process(const dataplane::ChunkHeader& header, transport::Message message);
  // With authentication: whether the push may be placed before it arrives
  // (its header tag verified under the current keys).
  bool MayPlace(const dataplane::ChunkHeader& header, absl::Span<const uint8_t> header_bytes) const;
  // How the push's payload checksum is to be checked once it may go on
  // (kCoveredByMac when its chunk tag verified the payload, kVerify when no
  // MAC was checked), or nullopt: it was dropped (counted) or held.
  std::optional<codec::ChecksumCheck> Authenticate(const dataplane::ChunkHeader& header,
                                                   transport::Message& message);
  // SetEpoch's part: refuses an epoch without keys once authentication is
  // on ...
  absl::Status CheckEpochKeys(const ShardEpoch& epoch) const;
  // ... and installs its keys (or decides authentication is off).
  void InstallEpochKeys(const ShardEpoch& epoch);
  void CountAuthFailure(dataplane::AuthFailure failure, const dataplane::ChunkHeader& header,
                        transport::PeerId from);
  // Holds a push until the keys that check it are installed (at most
  // kMaxHeldPushes and the reducer's max_deferred_bytes; past that it is
  // refused, RESOURCE_EXHAUSTED).
  void Hold(const dataplane::ChunkHeader& header, transport::Message& message);
  // Replays the pushes held for keys (SetEpoch, and Apply when the same
  // epoch's keys grew).
  void ReplayHeld();
  // The header to send `header` + `payload` with: sealed with the keys of
  // its epoch when authenticating; empty when there are none.
  std::vector<uint8_t> HeaderFor(const dataplane::ChunkHeader& header,
                                 absl::Span<const uint8_t> payload) const;
  void Reject(const absl::Status& why);
  void CountCompletedLocked(uint64_t elements, double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  using Peers = std::shared_ptr<const std::vector<transport::PeerId>>;  // by rank
  // Sends header + payload to every one of `peers`; `keep_alive` owns the
  // payload's bytes and is held until each send completed.
  void Broadcast(const dataplane::ChunkHeader& header, absl::Span<const uint8_t> payload,
                 std::shared_ptr<const void> keep_alive, const Peers& peers);
  Peers CurrentPeers() const;
  // Counts a failed send to `rank` and calls on_send_failure (rate limited).
  void CountSendFailure(uint32_t rank, const dataplane::ChunkHeader& chunk,
                        const absl::Status& why);
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

  // Authentication: whether it is on (nullopt: not decided yet), the keys
  // of the current and the previous epoch (aborts of the previous one are
  // sealed with its keys), the pushes held for keys, and the rate limit of
  // on_auth_failure.
  std::optional<bool> authenticate_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const dataplane::EpochKeys> keys_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const dataplane::EpochKeys> previous_keys_ ABSL_GUARDED_BY(mu_);
  uint32_t keys_world_size_ ABSL_GUARDED_BY(mu_) = 0;  // the workers of keys_' epoch
  std::vector<transport::Message> held_ ABSL_GUARDED_BY(mu_);
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The rate limit of a report callback: at most one call per interval,
  // telling how many were held back since the last one.
  struct ReportLimit {
    uint64_t unreported = 0;
    int64_t last_report_ns = 0;
    // Whether a report is due now (the first always is); if so,
    // `*held_back` is the count held back since the last one, which
    // restarts; if not, this one is counted as held back.
    bool Due(absl::Duration interval, uint64_t* held_back) {
      const int64_t now = absl::GetCurrentTimeNanos();
      if (last_report_ns != 0 && now - last_report_ns < absl::ToInt64Nanoseconds(interval)) {
        ++unreported;
        return false;
      }
      last_report_ns = now;
      *held_back = std::exchange(unreported, 0);
      return true;
    }
  };
  struct AuthFailureCount {
    uint64_t total = 0;
    ReportLimit report;  // of on_auth_failure, per reason
  };
  std::map<std::string, AuthFailureCount> auth_failures_ ABSL_GUARDED_BY(mu_);
  ReportLimit send_failure_report_ ABSL_GUARDED_BY(mu_);  // of on_send_failure
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_AGGREGATOR_SHARD_H_
