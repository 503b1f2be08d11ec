#include "server/aggregator/aggregator_daemon.h"

#include <memory>
#include <string>

#include "common/base/logging.h"
#include "server/aggregator/shard_epoch_from_state.h"

namespace gift::server {

using logging::Level;
using logging::Log;

AggregatorDaemon::AggregatorDaemon(AggregatorShard* shard, control::MemberSession* session)
    : shard_(shard),
      session_(session),
      last_tick_ns_(absl::GetCurrentTimeNanos()),
      follower_(session, kTick,
                {.on_wake =
                     [this] {
                       last_tick_ns_.store(absl::GetCurrentTimeNanos());
                       RetryUnapplied();
                       CompleteKeys();
                     },
                 .on_revision = [this](const gift::v1::ClusterState& s) { Apply(s); }}) {}

AggregatorDaemon::~AggregatorDaemon() { Stop(); }

void AggregatorDaemon::Stop() { follower_.Stop(); }

// Every new revision of the cluster state may carry a new epoch or new
// chunks for this shard.
void AggregatorDaemon::Apply(const gift::v1::ClusterState& state) {
  auto epoch = ShardEpochFromState(state, session_->rank());
  if (!epoch.ok()) {
    if (epoch.status().code() != absl::StatusCode::kFailedPrecondition) {
      Log(Level::kError, "bad_cluster_state", {{"error", epoch.status().ToString()}});
    }
    return;
  }
  // With data-plane authentication the session has the epoch's keys
  // (fetched before it installed the state); null when it is off.
  epoch->keys = session_->chunk_keys(epoch->epoch);
  const uint64_t before = shard_->epoch();
  const absl::Status s = shard_->Apply(*epoch);
  if (s.ok()) applied_keys_ = epoch->keys;
  if (!s.ok()) {
    // Logged once per epoch and error: the retries at every tick would
    // repeat it.
    const std::string error = s.ToString();
    if (!unapplied_ || unapplied_epoch_ != epoch->epoch || unapplied_error_ != error) {
      Log(Level::kWarning, "epoch_apply_failed",
          {{"epoch", static_cast<int64_t>(epoch->epoch)}, {"error", error}});
    }
    unapplied_ = true;
    unapplied_epoch_ = epoch->epoch;
    unapplied_error_ = error;
    return;
  }
  if (unapplied_ && unapplied_epoch_ == epoch->epoch) {
    Log(Level::kInfo, "epoch_applied_on_retry", {{"epoch", static_cast<int64_t>(epoch->epoch)}});
  }
  unapplied_ = false;
  chunks_.store(epoch->chunks.size());
  workers_.store(epoch->workers.size());
  if (epoch->epoch != before || epoch->chunks.size() != logged_chunks_) {
    logged_chunks_ = epoch->chunks.size();
    Log(Level::kInfo, "serving",
        {{"epoch", static_cast<int64_t>(epoch->epoch)},
         {"shard", static_cast<int64_t>(session_->rank())},
         {"workers", static_cast<int64_t>(epoch->workers.size())},
         {"chunks", static_cast<int64_t>(epoch->chunks.size())}});
  }
}

// A revision whose epoch could not be applied (its data-plane keys were
// not there yet: a re-joined server sees the new epoch on its Watch stream
// before its Join answer, with its new member id and key, is installed) is
// applied again at the next tick: the session's state may not change again
// for a long time, and until this shard applies the epoch no step of it
// completes.
void AggregatorDaemon::RetryUnapplied() {
  if (!unapplied_) return;
  std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
  if (state != nullptr) Apply(*state);
}

// A worker's key that the session lacks (its fetch failed or ran under an
// identity a re-join replaced) leaves that worker's pushes held by the
// shard: fetched again (at most every kKeyRetry), and once the session's
// keys of the shard's epoch change, the state is applied again, which
// installs them and replays the held pushes.
void AggregatorDaemon::CompleteKeys() {
  const absl::Time now = absl::Now();
  if (session_->keys_missing() && now - last_key_fetch_ >= kKeyRetry) {
    last_key_fetch_ = now;
    session_->FetchMissingKeys();
  }
  if (unapplied_ || applied_keys_ == nullptr) return;
  if (session_->chunk_keys(applied_keys_->epoch) == applied_keys_) return;
  std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
  if (state != nullptr) Apply(*state);
}

bool AggregatorDaemon::Drain(const DrainOptions& options) {
  const absl::Time start = absl::Now();
  gift::v1::DrainRequest request;
  request.set_member_id(session_->member_id());
  absl::StatusOr<gift::v1::DrainResponse> drained = session_->client().Drain(request);
  if (!drained.ok()) {
    Log(Level::kWarning, "drain_request_failed", {{"error", drained.status().ToString()}});
  }
  const std::string member_id = session_->member_id();
  auto removed = [&] {
    std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
    if (state == nullptr) return false;
    for (const gift::v1::Member& m : state->servers()) {
      if (m.member_id() == member_id) return false;
    }
    return true;
  };
  auto idle = [&] { return shard_->pending_chunks() == 0; };
  // Waiting chunks that no push has reached for `quiet` wait for ranks that
  // stopped pushing; nothing else is in flight.
  auto abandoned = [&] {
    return options.quiet > absl::ZeroDuration() && shard_->jobs_in_flight() == 0 &&
           absl::Now() - shard_->last_push() >= options.quiet;
  };
  const bool done = daemon::WaitUntil([&] { return removed() || idle() || abandoned(); },
                                      options.timeout, options.signals);
  const AggregatorShard::Counters c = shard_->counters();
  Log(done ? Level::kInfo : Level::kWarning, "drained",
      {{"complete", done},
       {"elapsed_ms", absl::ToInt64Milliseconds(absl::Now() - start)},
       {"chunks_completed", static_cast<int64_t>(c.chunks_completed)},
       {"left_waiting", shard_->incomplete_steps().Describe()}});
  return done;
}

}  // namespace gift::server
