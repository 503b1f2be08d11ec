#include "server/aggregator/aggregator_daemon.h"

#include <memory>
#include <string>

#include "common/base/logging.h"
#include "server/aggregator/shard_epoch_from_state.h"

namespace gift::server {

using logging::Level;
using logging::Log;

AggregatorDaemon::AggregatorDaemon(AggregatorShard* shard, control::MemberSession* session)
    : shard_(shard), session_(session), last_tick_ns_(absl::GetCurrentTimeNanos()) {
  follower_ = std::thread([this] { Follow(); });
}

AggregatorDaemon::~AggregatorDaemon() { Stop(); }

void AggregatorDaemon::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (follower_.joinable()) follower_.join();
}

// Every new revision of the cluster state may carry a new epoch or new
// chunks for this shard.
void AggregatorDaemon::Follow() {
  uint64_t seen = 0;
  size_t chunks = 0;
  while (!stop_.HasBeenNotified()) {
    auto state = session_->WaitForRevision(seen + 1, absl::Milliseconds(500));
    last_tick_ns_.store(absl::GetCurrentTimeNanos());
    if (!state.ok()) continue;  // timeout (re-check stop) or closed
    seen = (*state)->revision();
    auto epoch = ShardEpochFromState(**state, session_->rank());
    if (!epoch.ok()) {
      if (epoch.status().code() != absl::StatusCode::kFailedPrecondition) {
        Log(Level::kError, "bad_cluster_state", {{"error", epoch.status().ToString()}});
      }
      continue;
    }
    // With data-plane authentication the session has the epoch's keys
    // (fetched before it installed the state); null when it is off.
    epoch->keys = session_->chunk_keys(epoch->epoch);
    const uint64_t before = shard_->epoch();
    const absl::Status s = shard_->Apply(*epoch);
    if (!s.ok()) {
      Log(Level::kWarning, "epoch_apply_failed",
          {{"epoch", static_cast<int64_t>(epoch->epoch)}, {"error", s.ToString()}});
      continue;
    }
    chunks_.store(epoch->chunks.size());
    workers_.store(epoch->workers.size());
    if (epoch->epoch != before || epoch->chunks.size() != chunks) {
      chunks = epoch->chunks.size();
      Log(Level::kInfo, "serving",
          {{"epoch", static_cast<int64_t>(epoch->epoch)},
           {"shard", static_cast<int64_t>(session_->rank())},
           {"workers", static_cast<int64_t>(epoch->workers.size())},
           {"chunks", static_cast<int64_t>(epoch->chunks.size())}});
    }
  }
}

bool AggregatorDaemon::Drain(absl::Duration timeout, daemon::SignalWaiter* signals) {
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
  const bool done = daemon::WaitUntil([&] { return removed() || idle(); }, timeout, signals);
  const AggregatorShard::Counters c = shard_->counters();
  Log(done ? Level::kInfo : Level::kWarning, "drained",
      {{"complete", done},
       {"elapsed_ms", absl::ToInt64Milliseconds(absl::Now() - start)},
       {"chunks_completed", static_cast<int64_t>(c.chunks_completed)}});
  return done;
}

}  // namespace gift::server
