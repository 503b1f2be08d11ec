#include "server/aggregator/aggregator_shard.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dataplane/chunk_header.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

absl::StatusOr<std::unique_ptr<AggregatorShard>> AggregatorShard::Create(
    const AggregatorShardOptions& options, const transport::TransportFactory& make_transport) {
  if (!make_transport) return absl::InvalidArgumentError("no transport factory");
  std::unique_ptr<AggregatorShard> shard(new AggregatorShard(options));
  AggregatorShard* self = shard.get();
  ChunkReducerOptions reducer_options = options.reducer;
  // Called off the progress thread only (see ChunkReducer), once the
  // transport exists.
  reducer_options.register_memory = [self](absl::Span<uint8_t> buffer) {
    return self->transport_->RegisterMemory(buffer);
  };
  auto reducer = ChunkReducer::Create(reducer_options);
  if (!reducer.ok()) return reducer.status();
  shard->reducer_ = *std::move(reducer);
  shard->worker_peers_ = std::make_shared<const std::vector<transport::PeerId>>();
  shard->pool_ = std::make_unique<ThreadPool>(std::max<size_t>(1, options.reduce_threads));
  auto transport = make_transport(
      {.on_receive = [self](transport::Message m) { self->OnMessage(std::move(m)); },
       .on_peer_failure = [self](transport::PeerId peer,
                                 const absl::Status&) { self->connections_.Forget(peer); },
       .place_payload = [self](transport::PeerId, absl::Span<const uint8_t> header,
                               size_t bytes) -> absl::Span<uint8_t> {
         auto h = dataplane::ParseChunkHeader(header);
         if (!h.ok()) return {};
         if (!self->MayPlace(*h, header)) return {};
         return self->reducer_->PlacePush(*h, bytes);
       }});
  if (!transport.ok()) return transport.status();
  shard->transport_ = *std::move(transport);
  return shard;
}

AggregatorShard::~AggregatorShard() {
  // No new jobs; the pushes being handled finish (their jobs queued); the
  // queued reductions run and send (they need the progress thread running)
  // and give their slots back to the reducer, where ReleaseMemory finds
  // every registered buffer.
  reducer_->StopAccepting();
  { absl::MutexLock wait_for_handlers(&receiving_mu_); }
  {
    absl::MutexLock lock(&jobs_mu_);
    accepting_jobs_ = false;
  }
  pool_.reset();
  // Let the results' sends complete before their buffers are unregistered.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (sends_in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reducer_->ReleaseMemory(/*close=*/true);
  // Stop the progress thread (and its callbacks into this object).
  transport_.reset();
}

std::string AggregatorShard::address() const { return transport_->address(); }

AggregatorShard::Peers AggregatorShard::CurrentPeers() const {
  absl::MutexLock lock(&mu_);
  return worker_peers_;
}

absl::Status AggregatorShard::SetEpoch(const ShardEpoch& epoch) {
  if (epoch.workers.empty()) return absl::InvalidArgumentError("an epoch without workers");
  // Connect first (outside the lock: Connect waits for the progress thread,
  // which may be delivering a push that needs the lock).
  auto peers = std::make_shared<std::vector<transport::PeerId>>(epoch.workers.size());
  absl::Status unreachable;
  for (size_t rank = 0; rank < epoch.workers.size(); ++rank) {
    auto peer = connections_.Get(*transport_, epoch.workers[rank]);
    if (!peer.ok()) {
      unreachable = absl::UnavailableError(
          absl::StrCat("worker rank ", rank, " unreachable: ", peer.status().message()));
      (*peers)[rank] = 0;
      continue;
    }
    (*peers)[rank] = *peer;
  }
  if (epoch.pull_spec.has_value()) {
    if (auto s = reducer_->SetPullSpec(*epoch.pull_spec); !s.ok()) return s;
  }
  if (auto s = reducer_->SetTensorPullSpecs(epoch.tensor_pull_specs, epoch.version_pull_specs);
      !s.ok())
    return s;
  // Tell the previous epoch's workers about its aborted chunks before
  // switching to the new peers; completions of deferred pushes go to the new
  // epoch's workers.
  const Peers old_peers = CurrentPeers();
  if (auto s = CheckEpochKeys(epoch); !s.ok()) return s;
  auto update = reducer_->SetEpoch(
      epoch.epoch, static_cast<uint32_t>(epoch.workers.size()), epoch.chunks,
      epoch.nodes.size() == epoch.workers.size() ? NodeGroups::FromNodes(epoch.nodes)
                                                 : NodeGroups());
  if (!update.ok()) return update.status();
  InstallEpochKeys(epoch);
  // Each aborted step's reason names the ranks this shard still waited for.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const std::vector<uint8_t>>> reasons;
  for (const IncompleteStep& step : update->aborted_steps.steps()) {
    const std::string text =
        absl::StrCat("epoch ", epoch.epoch, " replaced epoch ", update->aborted_epoch,
                     " before the step completed; this server still waited for ",
                     DescribeRanks(step.missing_ranks), " (", DescribeChunks(step.chunks), ")");
    reasons[step.step] = std::make_shared<const std::vector<uint8_t>>(text.begin(), text.end());
    if (options_.on_step_aborted) options_.on_step_aborted(update->aborted_epoch, epoch.epoch, step);
  }
  for (const ChunkHeader& h : update->aborted) {
    const auto& reason = reasons.at(h.step);
    Broadcast(h, *reason, reason, old_peers);
  }
  {
    absl::MutexLock lock(&mu_);
    counters_.chunks_aborted += update->aborted.size();
    worker_peers_ = std::move(peers);
  }
  Deliver(*std::move(update));
  ReplayHeld();
  return unreachable;
}

void AggregatorShard::Deliver(EpochUpdate update) {
  for (const absl::Status& why : update.refused) Reject(why);
  const Peers peers = CurrentPeers();
  for (ReducedChunk& r : update.completed) {
    {
      absl::MutexLock lock(&mu_);
      CountCompletedLocked(r.elements, r.seconds);
    }
    auto payload = std::make_shared<const std::vector<uint8_t>>(std::move(r.payload));
    Broadcast(r.header, *payload, payload, peers);
  }
}

absl::Status AggregatorShard::Apply(const ShardEpoch& epoch) {
  const uint64_t current = reducer_->epoch();
  if (!reducer_->has_epoch() || epoch.epoch > current) return SetEpoch(epoch);
  if (epoch.epoch < current) return absl::OkStatus();
  if (auto s = CheckEpochKeys(epoch); !s.ok()) return s;
  InstallEpochKeys(epoch);  // the same epoch, maybe with more peers' keys
  ReplayHeld();             // pushes that waited for them
  if (epoch.pull_spec.has_value()) {
    if (auto s = reducer_->SetPullSpec(*epoch.pull_spec); !s.ok()) return s;
  }
  if (auto s = reducer_->SetTensorPullSpecs(epoch.tensor_pull_specs, epoch.version_pull_specs);
      !s.ok())
    return s;
  auto update = reducer_->AddChunks(epoch.epoch, epoch.chunks);
  if (!update.ok()) return update.status();
  Deliver(*std::move(update));
  return absl::OkStatus();
}

void AggregatorShard::OnMessage(transport::Message message) {
  absl::ReaderMutexLock receiving(&receiving_mu_);
  auto header = dataplane::ParseChunkHeader(message.header);
  if (!header.ok()) {
    // A placement needs a parsed header, so nothing was placed.
    return Reject(header.status());
  }
  Process(*header, std::move(message));
}

void AggregatorShard::Process(const ChunkHeader& header, transport::Message message) {
  const std::optional<codec::ChecksumCheck> checksum = Authenticate(header, message);
  if (!checksum.has_value()) return;
  const size_t bytes = message.bytes().size();
  auto job = message.placed.data() != nullptr
                 ? reducer_->AcceptPlaced(header, message.placed, *checksum)
                 : reducer_->Accept(header, std::move(message.payload), *checksum);
  if (!job.ok()) return Reject(job.status());
  {
    absl::MutexLock lock(&mu_);
    ++counters_.pushes_accepted;
    counters_.push_bytes_received += bytes;
  }
  if (job->has_value()) Schedule(**std::move(job), CurrentPeers());
}

void AggregatorShard::Schedule(ReductionJob job, Peers peers) {
  absl::MutexLock lock(&jobs_mu_);
  if (!accepting_jobs_) return;  // shutting down
  jobs_.push_back({.job = std::move(job), .peers = std::move(peers)});
  jobs_in_flight_.fetch_add(1);
  pool_->Schedule([this] { RunJob(); });
}

void AggregatorShard::RunJob() {
  std::optional<QueuedJob> queued;
  {
    absl::MutexLock lock(&jobs_mu_);
    if (jobs_.empty()) return;
    queued.emplace(std::move(jobs_.front()));
    jobs_.pop_front();
  }
  auto result = reducer_->Reduce(std::move(queued->job));
  if (!result.ok()) {
    Reject(result.status());
  } else {
    {
      absl::MutexLock lock(&mu_);
      CountCompletedLocked(result->elements, result->seconds);
    }
    Broadcast(result->header, result->payload(), result->buffer, queued->peers);
  }
  jobs_in_flight_.fetch_sub(1);
}

void AggregatorShard::CountCompletedLocked(uint64_t elements, double seconds) {
  ++counters_.chunks_completed;
  counters_.reduce_seconds += seconds;
  counters_.reduced_bytes += elements * sizeof(float);
}

void AggregatorShard::Reject(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    ++rejections_[absl::StatusCodeToString(why.code())];
  }
  if (options_.on_reject) options_.on_reject(why);
}

void AggregatorShard::Broadcast(const ChunkHeader& header, absl::Span<const uint8_t> payload,
                                std::shared_ptr<const void> keep_alive, const Peers& peers) {
  const std::vector<uint8_t> bytes = HeaderFor(header, payload);
  if (bytes.empty()) {  // no key of its epoch: nothing a worker would accept
    absl::MutexLock lock(&mu_);
    counters_.send_failures += peers->size();
    return;
  }
  const size_t size = payload.size();
  for (uint32_t rank = 0; rank < peers->size(); ++rank) {
    const transport::PeerId peer = (*peers)[rank];
    if (peer == 0) {  // unreachable this epoch
      CountSendFailure(rank, header, absl::UnavailableError("unreachable in this epoch"));
      continue;
    }
    sends_in_flight_.fetch_add(1);
    // The callback holds the payload until the transport is done with it.
    const absl::Status s = transport_->Send(
        peer, bytes, payload, [this, keep_alive, size, rank, header](const absl::Status& done) {
          if (done.ok()) {
            absl::MutexLock lock(&mu_);
            counters_.result_bytes_sent += size;
          } else {
            CountSendFailure(rank, header, done);
          }
          sends_in_flight_.fetch_sub(1);
        });
    if (!s.ok()) {
      sends_in_flight_.fetch_sub(1);
      CountSendFailure(rank, header, s);
    }
  }
}

void AggregatorShard::CountSendFailure(uint32_t rank, const ChunkHeader& chunk,
                                       const absl::Status& why) {
  uint64_t unreported = 0;
  {
    absl::MutexLock lock(&mu_);
    ++counters_.send_failures;
    if (!send_failure_report_.Due(options_.send_failure_report_interval, &unreported)) return;
  }
  if (options_.on_send_failure) options_.on_send_failure(rank, chunk, why, unreported);
}

AggregatorShard::Counters AggregatorShard::counters() const {
  Counters c;
  {
    absl::MutexLock lock(&mu_);
    c = counters_;
  }
  c.chunks_superseded = reducer_->superseded_chunks();
  return c;
}

std::map<std::string, uint64_t> AggregatorShard::rejections() const {
  absl::MutexLock lock(&mu_);
  return rejections_;
}

}  // namespace gift::server
