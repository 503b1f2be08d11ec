#include "server/aggregator/aggregator_shard.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dataplane/chunk_header.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

absl::StatusOr<std::unique_ptr<AggregatorShard>> AggregatorShard::Create(
    const AggregatorShardOptions& options, const TransportFactory& make_transport) {
  if (!make_transport) return absl::InvalidArgumentError("no transport factory");
  std::unique_ptr<AggregatorShard> shard(new AggregatorShard(options));
  auto reducer = ChunkReducer::Create(options.reducer);
  if (!reducer.ok()) return reducer.status();
  shard->reducer_ = *std::move(reducer);
  AggregatorShard* self = shard.get();
  auto transport = make_transport(
      {.on_receive = [self](transport::Message m) { self->OnMessage(std::move(m)); },
       .on_peer_failure = [self](transport::PeerId peer,
                                 const absl::Status&) { self->connections_.Forget(peer); }});
  if (!transport.ok()) return transport.status();
  shard->transport_ = *std::move(transport);
  return shard;
}

AggregatorShard::~AggregatorShard() {
  // Stop the progress thread (and its callbacks into this object) first.
  transport_.reset();
}

std::string AggregatorShard::address() const { return transport_->address(); }

absl::Status AggregatorShard::SetEpoch(const ShardEpoch& epoch) {
  if (epoch.workers.empty()) return absl::InvalidArgumentError("an epoch without workers");
  // Connect first (outside the lock: Connect waits for the progress thread,
  // which may be delivering a push that needs the lock).
  std::vector<transport::PeerId> peers(epoch.workers.size());
  absl::Status unreachable;
  for (size_t rank = 0; rank < epoch.workers.size(); ++rank) {
    auto peer = connections_.Get(*transport_, epoch.workers[rank]);
    if (!peer.ok()) {
      unreachable = absl::UnavailableError(
          absl::StrCat("worker rank ", rank, " unreachable: ", peer.status().message()));
      peers[rank] = 0;
      continue;
    }
    peers[rank] = *peer;
  }
  if (epoch.pull_spec.has_value()) {
    if (auto s = reducer_->SetPullSpec(*epoch.pull_spec); !s.ok()) return s;
  }
  // Tell the previous epoch's workers about its aborted chunks before
  // switching to the new peers; completions of deferred pushes go to the new
  // epoch's workers.
  std::vector<transport::PeerId> old_peers;
  {
    absl::MutexLock lock(&mu_);
    old_peers = worker_peers_;
  }
  auto update =
      reducer_->SetEpoch(epoch.epoch, static_cast<uint32_t>(epoch.workers.size()), epoch.chunks);
  if (!update.ok()) return update.status();
  auto reason = std::make_shared<std::vector<uint8_t>>();
  const std::string text = absl::StrCat("epoch ", epoch.epoch, " replaced the step's epoch");
  reason->assign(text.begin(), text.end());
  for (const ChunkHeader& h : update->aborted) Broadcast(h, reason, old_peers);
  {
    absl::MutexLock lock(&mu_);
    counters_.chunks_aborted += update->aborted.size();
    worker_peers_ = std::move(peers);
  }
  Deliver(*std::move(update));
  return unreachable;
}

void AggregatorShard::Deliver(EpochUpdate update) {
  for (const absl::Status& why : update.refused) Reject(why);
  for (ReducedChunk& r : update.completed) {
    {
      absl::MutexLock lock(&mu_);
      CountCompletedLocked(r);
    }
    Broadcast(r.header, std::make_shared<std::vector<uint8_t>>(std::move(r.payload)));
  }
}

absl::Status AggregatorShard::Apply(const ShardEpoch& epoch) {
  const uint64_t current = reducer_->epoch();
  if (!reducer_->has_epoch() || epoch.epoch > current) return SetEpoch(epoch);
  if (epoch.epoch < current) return absl::OkStatus();
  if (epoch.pull_spec.has_value()) {
    if (auto s = reducer_->SetPullSpec(*epoch.pull_spec); !s.ok()) return s;
  }
  auto update = reducer_->AddChunks(epoch.epoch, epoch.chunks);
  if (!update.ok()) return update.status();
  Deliver(*std::move(update));
  return absl::OkStatus();
}

void AggregatorShard::OnMessage(transport::Message message) {
  auto header = dataplane::ParseChunkHeader(message.header);
  if (!header.ok()) return Reject(header.status());
  const size_t bytes = message.payload.size();
  auto result = reducer_->AddPush(*header, std::move(message.payload));
  if (!result.ok()) return Reject(result.status());
  {
    absl::MutexLock lock(&mu_);
    ++counters_.pushes_accepted;
    counters_.push_bytes_received += bytes;
    if (result->has_value()) CountCompletedLocked(**result);
  }
  if (!result->has_value()) return;
  Broadcast((*result)->header,
            std::make_shared<std::vector<uint8_t>>(std::move((*result)->payload)));
}

void AggregatorShard::CountCompletedLocked(const ReducedChunk& chunk) {
  ++counters_.chunks_completed;
  counters_.reduce_seconds += chunk.seconds;
  counters_.reduced_bytes += chunk.elements * sizeof(float);
}

void AggregatorShard::Reject(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    ++rejections_[absl::StatusCodeToString(why.code())];
  }
  if (options_.on_reject) options_.on_reject(why);
}

void AggregatorShard::Broadcast(const ChunkHeader& header,
                                std::shared_ptr<std::vector<uint8_t>> payload) {
  std::vector<transport::PeerId> peers;
  {
    absl::MutexLock lock(&mu_);
    peers = worker_peers_;
  }
  Broadcast(header, std::move(payload), peers);
}

void AggregatorShard::Broadcast(const ChunkHeader& header,
                                std::shared_ptr<std::vector<uint8_t>> payload,
                                const std::vector<transport::PeerId>& peers) {
  const auto bytes = dataplane::SerializeChunkHeader(header);
  for (transport::PeerId peer : peers) {
    if (peer == 0) continue;  // unreachable this epoch
    // The callback keeps the payload alive until the transport is done.
    const absl::Status s =
        transport_->Send(peer, bytes, *payload, [this, payload](const absl::Status& done) {
          absl::MutexLock lock(&mu_);
          if (done.ok()) {
            counters_.result_bytes_sent += payload->size();
          } else {
            ++counters_.send_failures;
          }
        });
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      ++counters_.send_failures;
    }
  }
}

AggregatorShard::Counters AggregatorShard::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::map<std::string, uint64_t> AggregatorShard::rejections() const {
  absl::MutexLock lock(&mu_);
  return rejections_;
}

}  // namespace gift::server
