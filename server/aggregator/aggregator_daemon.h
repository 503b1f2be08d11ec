// The core of gift-server without its flags, gRPC health or metrics: follows
// the coordinator's cluster state through the member session and applies
// every epoch (and every new chunk of this shard) to the AggregatorShard,
// and drains the member on shutdown. main.cc wires it to flags, signals,
// health and metrics; tests run it in-process.
//
//   AggregatorDaemon daemon(shard.get(), session.get(), {});
//   ...                                   // serving
//   daemon.Drain({.timeout = absl::Seconds(30), .signals = &signals});
//   daemon.Stop();
//
// An epoch that fails to apply (its data-plane keys are not there yet, as
// after a re-join) is applied again at every tick (100 ms) until it succeeds
// or a newer revision replaces it.
// So is the state when the session's keys of the applied epoch changed
// (a worker's key fetched late: the shard holds that worker's pushes until
// then); a key the session still lacks is fetched again every 250 ms.
//
// Logs (common/base/logging.h): `serving` (epoch, shard, workers, chunks)
// after every change of the epoch or of this shard's chunk count,
// `epoch_apply_failed` (once per epoch and error), `epoch_applied_on_retry`,
// `bad_cluster_state`, `drained`.
//
// Ownership: shares the shard and the session, which must outlive the
// daemon. Thread safety: every method may be called from any thread; Drain
// from one at a time.
#ifndef GIFT_SERVER_AGGREGATOR_AGGREGATOR_DAEMON_H_
#define GIFT_SERVER_AGGREGATOR_AGGREGATOR_DAEMON_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "common/control/state_follower.h"
#include "common/daemon/shutdown.h"
#include "server/aggregator/aggregator_shard.h"

namespace gift::server {

class AggregatorDaemon {
 public:
  // Starts following the cluster state (control::StateFollower).
  AggregatorDaemon(AggregatorShard* shard, control::MemberSession* session);
  ~AggregatorDaemon();  // Stop()
  AggregatorDaemon(const AggregatorDaemon&) = delete;
  AggregatorDaemon& operator=(const AggregatorDaemon&) = delete;

  // The shard id (the session's rank).
  uint32_t shard_id() const { return session_->rank(); }
  // Of the last epoch applied successfully (0 before the first).
  uint64_t chunks() const { return chunks_.load(); }
  uint64_t workers() const { return workers_.load(); }
  // When the follower loop last turned (it wakes at least every 100 ms):
  // the watchdog's heartbeat.
  absl::Time last_tick() const { return absl::FromUnixNanos(last_tick_ns_.load()); }

  struct DrainOptions {
    // The longest wait.
    absl::Duration timeout = absl::Seconds(30);
    // The chunks still waiting for ranks once no push has arrived for this
    // long are abandoned (their missing ranks stopped pushing: a step that
    // failed or timed out on the workers, a rank that is gone), and the
    // drain ends. Zero: wait for them until `timeout`.
    absl::Duration quiet = absl::Seconds(5);
    // Optional: another signal cuts the wait short.
    daemon::SignalWaiter* signals = nullptr;
  };
  // Asks the coordinator to drain this member, then waits until no chunk is
  // in flight here, or only abandoned ones are (see `quiet`), or the
  // coordinator dropped the member; or until `timeout` passed or another
  // signal came. True when drained. Logs `drained`, naming the steps left
  // behind and the ranks they missed.
  bool Drain(const DrainOptions& options);

  // Stops following (joins the thread); idempotent.
  void Stop();

 private:
  // Applies a new revision's epoch and chunks to the shard (the follower's
  // thread).
  void Apply(const gift::v1::ClusterState& state);
  // Applies the session's state again when the last Apply failed (the
  // follower's thread, at every tick).
  void RetryUnapplied();
  // Fetches the keys the session lacks and applies the state again when
  // the applied epoch's keys changed (the follower's thread, every tick).
  void CompleteKeys();

  static constexpr absl::Duration kTick = absl::Milliseconds(100);
  static constexpr absl::Duration kKeyRetry = absl::Milliseconds(250);

  AggregatorShard* const shard_;
  control::MemberSession* const session_;
  std::atomic<uint64_t> chunks_{0};
  std::atomic<uint64_t> workers_{0};
  std::atomic<int64_t> last_tick_ns_;
  size_t logged_chunks_ = 0;         // the chunk count last logged (follower's thread)
  // The last Apply failed, for this epoch with this error (follower's thread).
  bool unapplied_ = false;
  uint64_t unapplied_epoch_ = 0;
  std::string unapplied_error_;
  // The keys of the last epoch applied; when the key fetch was last tried
  // (follower's thread).
  std::shared_ptr<const dataplane::EpochKeys> applied_keys_;
  absl::Time last_key_fetch_ = absl::InfinitePast();
  control::StateFollower follower_;  // last: its thread uses the members above
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_AGGREGATOR_DAEMON_H_
