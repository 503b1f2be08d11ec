#include "server/aggregator/chunk_reducer.h"

#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dataplane/chunk_rng_key.h"
#include "server/aggregator/reducer_slots.h"
#include "server/aggregator/step_reduction.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

using reducer_internal::CheckVersion;
using reducer_internal::ChunkState;
using reducer_internal::OpenStep;
using reducer_internal::RecycleIfUnused;
using reducer_internal::Slot;
using reducer_internal::StepInputs;

ReductionJob::ReductionJob(ReductionJob&&) noexcept = default;
ReductionJob& ReductionJob::operator=(ReductionJob&&) noexcept = default;
ReductionJob::~ReductionJob() = default;

namespace {

absl::Status WithHeader(const ChunkHeader& header, const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(dataplane::ToString(header), ": ", what, s.message()));
}

}  // namespace

ChunkReducer::ChunkReducer(const ChunkReducerOptions& options)
    : options_(options),
      registry_(std::make_shared<BufferRegistry>(options.register_memory)),
      pull_spec_(options.pull_spec),
      deferred_(options.max_deferred_bytes) {}

absl::StatusOr<std::unique_ptr<ChunkReducer>> ChunkReducer::Create(
    const ChunkReducerOptions& options) {
  if (auto s = codec::Validate(options.pull_spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pull codec: ", s.message()));
  }
  return std::unique_ptr<ChunkReducer>(new ChunkReducer(options));
}

absl::StatusOr<EpochUpdate> ChunkReducer::SetEpoch(uint64_t epoch, uint32_t world_size,
                                                   absl::flat_hash_map<ChunkId, ChunkShape> chunks,
                                                   NodeGroups nodes) {
  if (world_size == 0) return absl::InvalidArgumentError("world size 0");
  EpochUpdate update;
  // Chunk states dropped here free their buffers after the lock.
  absl::flat_hash_map<ChunkId, std::shared_ptr<ChunkState>> old;
  {
    absl::MutexLock lock(&mu_);
    if (has_epoch_ && epoch <= epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("epoch ", epoch, " is not above the current epoch ", epoch_));
    }
    reducer_internal::EndedSteps ended{
        .aborted = &update.aborted, .incomplete = &update.aborted_steps, .orphans = &orphans_};
    update.aborted_epoch = epoch_;
    for (auto& [id, state] : chunks_) {
      EndOpenSteps(*state, id.first, id.second, epoch_, world_size_, ended);
    }
    pending_chunks_ -= ended.pushed_steps;
    pending_bytes_ -= ended.received_bytes;
    old.swap(chunks_);
    for (const auto& [id, shape] : chunks) {
      auto it = old.find(id);
      chunks_[id] = it != old.end() && it->second->shape == shape
                        ? it->second  // buffers kept
                        : std::make_shared<ChunkState>(shape);
    }
    has_epoch_ = true;
    epoch_ = epoch;
    world_size_ = world_size;
    nodes_ = std::move(nodes);
  }
  old.clear();
  registry_->Drain();
  ReplayDeferred(update);
  return update;
}

absl::StatusOr<EpochUpdate> ChunkReducer::AddChunks(
    uint64_t epoch, const absl::flat_hash_map<ChunkId, ChunkShape>& chunks) {
  {
    absl::MutexLock lock(&mu_);
    if (!has_epoch_ || epoch != epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunks for epoch ", epoch, ", current epoch ", epoch_));
    }
    for (const auto& [id, shape] : chunks) {
      auto it = chunks_.find(id);
      if (it != chunks_.end() && it->second->shape != shape) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", id.second, " of tensor ", id.first,
                                                       " changed shape within epoch ", epoch));
      }
    }
    for (const auto& [id, shape] : chunks) {
      if (!chunks_.contains(id)) chunks_[id] = std::make_shared<ChunkState>(shape);
    }
  }
  EpochUpdate update;
  ReplayDeferred(update);
  return update;
}

bool ChunkReducer::MustDeferLocked(const ChunkHeader& header) const {
  if (!has_epoch_ || header.epoch > epoch_) return true;
  return header.epoch == epoch_ && !chunks_.contains(ChunkId{header.tensor_id, header.chunk_index});
}

void ChunkReducer::ReplayDeferred(EpochUpdate& update) {
  std::vector<DeferredPushes::Push> ready;
  {
    absl::MutexLock lock(&mu_);
    ready = deferred_.TakeDecidable(
        epoch_,
        [this](const ChunkHeader& header) {
          mu_.AssertReaderHeld();
          return MustDeferLocked(header);
        },
        update.refused);
  }
  for (DeferredPushes::Push& d : ready) {
    auto result = AddPush(d.header, std::move(d.payload));
    if (!result.ok()) {
      update.refused.push_back(result.status());
    } else if (result->has_value()) {
      update.completed.push_back(**std::move(result));
    }
  }
}

absl::Status ChunkReducer::SetPullSpec(const codec::CodecSpec& spec) {
  if (auto s = codec::Validate(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pull codec: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  pull_spec_ = spec;
  return absl::OkStatus();
}

codec::CodecSpec ChunkReducer::pull_spec() const {
  absl::MutexLock lock(&mu_);
  return pull_spec_;
}

absl::Status ChunkReducer::SetTensorPullSpecs(
    absl::flat_hash_map<uint64_t, codec::CodecSpec> specs,
    absl::flat_hash_map<VersionKey, codec::CodecSpec> version_specs) {
  for (const auto& [tensor, spec] : specs) {
    if (auto s = codec::Validate(spec); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull codec of tensor ", tensor, ": ", s.message()));
    }
  }
  for (const auto& [key, spec] : version_specs) {
    if (auto s = codec::Validate(spec); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("pull codec of tensor ", key.first,
                                                     " version ", key.second, ": ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  tensor_pull_specs_ = std::move(specs);
  version_pull_specs_ = std::move(version_specs);
  return absl::OkStatus();
}

codec::CodecSpec ChunkReducer::PullSpecLocked(uint64_t tensor_id, uint64_t version) const {
  if (auto v = version_pull_specs_.find(VersionKey(tensor_id, version));
      v != version_pull_specs_.end()) {
    return v->second;
  }
  auto it = tensor_pull_specs_.find(tensor_id);
  return it == tensor_pull_specs_.end() ? pull_spec_ : it->second;
}

codec::CodecSpec ChunkReducer::pull_spec(uint64_t tensor_id, uint64_t version) const {
  absl::MutexLock lock(&mu_);
  return PullSpecLocked(tensor_id, version);
}

absl::StatusOr<ChunkState*> ChunkReducer::CheckPushLocked(const ChunkHeader& header,
                                                          const ChunkShape& got) const {
  if (header.epoch != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(dataplane::ToString(header), ": epoch ",
                                                      header.epoch, ", current epoch ", epoch_));
  }
  if (header.world_size != world_size_ || header.rank >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataplane::ToString(header), ": world size of the epoch is ", world_size_));
  }
  auto chunk = chunks_.find(ChunkId{header.tensor_id, header.chunk_index});
  if (chunk == chunks_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dataplane::ToString(header), ": chunk not owned by this shard"));
  }
  const ChunkShape& shape = chunk->second->shape;
  if (got != shape) {
    return absl::InvalidArgumentError(absl::StrCat(dataplane::ToString(header), ": payload is ",
                                                   got.rows, "x", got.cols, ", chunk is ",
                                                   shape.rows, "x", shape.cols));
  }
  return chunk->second.get();
}

absl::StatusOr<std::optional<ReductionJob>> ChunkReducer::StoreLocked(
    const ChunkHeader& header, ChunkState& chunk, StepInputs& inputs,
    const codec::EncodedView& view, uint32_t ranks) {
  Slot& slot = inputs.slots[header.rank];
  if (inputs.received == 0) {
    inputs.basis_version = header.basis_version;
    ++pending_chunks_;
  }
  slot.state = Slot::State::kReceived;
  slot.view = view;
  pending_bytes_ += slot.buffer.size();
  inputs.received += ranks;
  last_push_ = absl::Now();
  if (inputs.received < world_size_) return std::nullopt;
  auto it = chunk.steps.find(header.step);
  ReductionJob job;
  job.header_ = header;
  job.shape_ = chunk.shape;
  job.pull_spec_ = PullSpecLocked(header.tensor_id, header.basis_version);
  job.chunk_ = chunks_.at(ChunkId{header.tensor_id, header.chunk_index});
  job.inputs_ = std::move(it->second);
  chunk.steps.erase(it);
  for (const Slot& s : job.inputs_->slots) pending_bytes_ -= s.buffer.size();
  --pending_chunks_;
  // Every rank pushed this step of the chunk, so every rank is done with its
  // earlier steps: an earlier one still open was abandoned.
  reducer_internal::EndedSteps superseded{.orphans = &orphans_};
  EndOpenSteps(chunk, header.tensor_id, header.chunk_index, epoch_, world_size_, superseded,
               /*below=*/header.step);
  pending_chunks_ -= superseded.pushed_steps;
  pending_bytes_ -= superseded.received_bytes;
  superseded_chunks_ += superseded.pushed_steps;
  return std::optional<ReductionJob>(std::move(job));
}

absl::Span<uint8_t> ChunkReducer::PlacePush(const ChunkHeader& header, size_t payload_bytes) {
  if ((header.kind != ChunkKind::kPush && header.kind != ChunkKind::kNodePush) ||
      payload_bytes == 0 || payload_bytes > options_.payload_limits.max_bytes) {
    return {};
  }
  absl::MutexLock lock(&mu_);
  if (closed_ || MustDeferLocked(header) || header.epoch != epoch_ ||
      header.world_size != world_size_ || header.rank >= world_size_) {
    return {};
  }
  auto chunk = chunks_.find(ChunkId{header.tensor_id, header.chunk_index});
  if (chunk == chunks_.end()) return {};
  StepInputs& inputs = OpenStep(*chunk->second, header.step, world_size_);
  Slot& slot = inputs.slots[header.rank];
  if (slot.state != Slot::State::kEmpty) return {};  // a duplicate: Accept refuses it
  slot.buffer.Resize(payload_bytes, registry_);
  slot.state = Slot::State::kPlaced;
  return slot.buffer.span();
}

absl::StatusOr<Slot*> ChunkReducer::TakePlacedLocked(const ChunkHeader& header,
                                                     absl::Span<const uint8_t> placed,
                                                     ChunkState** chunk) {
  if (auto c = chunks_.find(ChunkId{header.tensor_id, header.chunk_index}); c != chunks_.end()) {
    *chunk = c->second.get();
    if (auto s = (*chunk)->steps.find(header.step);
        s != (*chunk)->steps.end() && header.rank < s->second->slots.size()) {
      Slot& candidate = s->second->slots[header.rank];
      if (candidate.state == Slot::State::kPlaced && candidate.buffer.data() == placed.data() &&
          candidate.buffer.size() == placed.size()) {
        return &candidate;
      }
    }
  }
  for (auto it = orphans_.begin(); it != orphans_.end(); ++it) {
    if (it->data() == placed.data()) {
      orphans_.erase(it);  // freed (registered memory: at the next Drain)
      return absl::FailedPreconditionError(
          absl::StrCat(dataplane::ToString(header), ": its epoch ended while the payload arrived"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(dataplane::ToString(header), ": payload not placed by PlacePush"));
}

void ChunkReducer::DiscardPlaced(const ChunkHeader& header, absl::Span<const uint8_t> placed) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;  // the slot stays placed (and reachable for ReleaseMemory)
  ChunkState* chunk = nullptr;
  absl::StatusOr<Slot*> slot = TakePlacedLocked(header, placed, &chunk);
  if (!slot.ok()) return;  // an orphan (freed now) or not placed here
  (*slot)->state = Slot::State::kEmpty;
  RecycleIfUnused(*chunk, header.step);
}

absl::StatusOr<std::optional<ReductionJob>> ChunkReducer::AcceptPlaced(
    const ChunkHeader& header, absl::Span<const uint8_t> placed, codec::ChecksumCheck checksum) {
  // The placed bytes stay put while their slot (or orphan) holds them, so
  // they are parsed before taking the lock.
  auto parsed = codec::ParsePayload(placed, options_.payload_limits, checksum);
  absl::MutexLock lock(&mu_);
  // The slot stays placed (and reachable for ReleaseMemory).
  if (closed_) return absl::UnavailableError("the reducer is shutting down");
  ChunkState* chunk = nullptr;
  absl::StatusOr<Slot*> found = TakePlacedLocked(header, placed, &chunk);
  if (!found.ok()) return found.status();
  Slot* slot = *found;
  auto refuse = [&](const absl::Status& why) {
    slot->state = Slot::State::kEmpty;
    RecycleIfUnused(*chunk, header.step);
    return why;
  };
  if (!parsed.ok()) return refuse(WithHeader(header, parsed.status(), "payload: "));
  auto checked = CheckPushLocked(header, ChunkShape{parsed->view.rows, parsed->view.cols});
  if (!checked.ok()) return refuse(checked.status());
  StepInputs& inputs = *chunk->steps.at(header.step);
  if (auto s = CheckVersion(header, inputs); !s.ok()) return refuse(s);
  auto ranks = nodes_.Cover(header, absl::MakeSpan(inputs.covered));  // checks the kind
  if (!ranks.ok()) return refuse(ranks.status());
  return StoreLocked(header, *chunk, inputs, parsed->view, *ranks);
}

absl::StatusOr<std::optional<ReductionJob>> ChunkReducer::Accept(const ChunkHeader& header,
                                                                 std::vector<uint8_t> payload,
                                                                 codec::ChecksumCheck checksum) {
  if (header.kind != ChunkKind::kPush && header.kind != ChunkKind::kNodePush) {
    return absl::InvalidArgumentError(absl::StrCat("not a push: ", dataplane::ToString(header)));
  }
  // Parse (checksum, layout, contents) before taking the lock.
  auto parsed = codec::ParsePayload(payload, options_.payload_limits, checksum);
  if (!parsed.ok()) return WithHeader(header, parsed.status(), "payload: ");
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("the reducer is shutting down");
  if (MustDeferLocked(header)) {
    if (auto s = deferred_.Hold(header, std::move(payload)); !s.ok()) return s;
    return std::nullopt;
  }
  auto chunk = CheckPushLocked(header, ChunkShape{parsed->view.rows, parsed->view.cols});
  if (!chunk.ok()) return chunk.status();
  StepInputs& inputs = OpenStep(**chunk, header.step, world_size_);
  if (auto s = CheckVersion(header, inputs); !s.ok()) {
    RecycleIfUnused(**chunk, header.step);
    return s;
  }
  Slot& slot = inputs.slots[header.rank];
  if (slot.state != Slot::State::kEmpty) {
    return absl::AlreadyExistsError(
        absl::StrCat(dataplane::ToString(header), ": rank already contributed"));
  }
  auto ranks = nodes_.Cover(header, absl::MakeSpan(inputs.covered));
  if (!ranks.ok()) {
    RecycleIfUnused(**chunk, header.step);
    return ranks.status();
  }
  // Into the slot, and the view moved with the bytes.
  const codec::EncodedView view = CopyIntoSlot(slot, payload, parsed->view, registry_);
  return StoreLocked(header, **chunk, inputs, view, *ranks);
}

absl::StatusOr<ChunkResult> ChunkReducer::Reduce(ReductionJob job) {
  const auto start = std::chrono::steady_clock::now();
  StepInputs& inputs = *job.inputs_;
  ChunkState& chunk = *job.chunk_;
  const ChunkHeader& last = job.header_;
  std::shared_ptr<ReusableBuffer> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& b : chunk.results) {
      if (b.use_count() == 1) {  // no send, no other Reduce holds it
        out = b;
        break;
      }
    }
    if (out == nullptr) out = chunk.results.emplace_back(std::make_shared<ReusableBuffer>());
  }
  // The sends that held this buffer are done with it (their release of the
  // reference happened before this point).
  std::atomic_thread_fence(std::memory_order_acquire);
  const absl::Status status =
      reducer_internal::EncodeAverage(inputs, job.shape_, job.pull_spec_,
                                      dataplane::ChunkRngKey(last.tensor_id, last.chunk_index,
                                                             last.step, dataplane::kResultRngRank),
                                      options_.codec_options, *out, registry_);
  const size_t world = inputs.slots.size();
  // The slots go back to the chunk for a later step, registered (this is no
  // progress thread).
  for (Slot& slot : inputs.slots) {
    slot.buffer.Register();
    slot.state = Slot::State::kEmpty;
  }
  {
    absl::MutexLock lock(&mu_);
    inputs.received = 0;
    chunk.spare.push_back(std::move(job.inputs_));
  }
  registry_->Drain();
  if (!status.ok()) return status;
  ChunkResult result;
  result.header = last;
  result.header.kind = ChunkKind::kResult;
  result.header.set_ranks_summed(static_cast<uint32_t>(world));
  result.buffer = std::move(out);
  result.elements = job.shape_.rows * job.shape_.cols;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

absl::StatusOr<std::optional<ReducedChunk>> ChunkReducer::AddPush(const ChunkHeader& header,
                                                                  std::vector<uint8_t> payload) {
  auto job = Accept(header, std::move(payload));
  if (!job.ok()) return job.status();
  if (!job->has_value()) return std::nullopt;
  auto result = Reduce(**std::move(job));
  if (!result.ok()) return result.status();
  const absl::Span<const uint8_t> bytes = result->payload();
  return std::optional<ReducedChunk>(ReducedChunk{.header = result->header,
                                                  .payload = {bytes.begin(), bytes.end()},
                                                  .elements = result->elements,
                                                  .seconds = result->seconds});
}

void ChunkReducer::StopAccepting() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void ChunkReducer::ReleaseMemory(bool close) {
  if (!close) {
    registry_->Drain();
    return;
  }
  // Every buffer leaves the reducer's maps (nothing reaches it any more)
  // and is unregistered, but its memory stays until the reducer goes: the
  // transport may still write a placed slot until it is destroyed.
  Closed closed;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    closed.chunks.swap(chunks_);
    closed.orphans.swap(orphans_);
    pending_chunks_ = 0;
    pending_bytes_ = 0;
  }
  for (auto& [id, chunk] : closed.chunks) reducer_internal::UnregisterBuffers(*chunk);
  for (ReusableBuffer& orphan : closed.orphans) orphan.Unregister();
  registry_->Close();
  absl::MutexLock lock(&mu_);
  closed_buffers_.push_back(std::move(closed));
}

bool ChunkReducer::has_epoch() const {
  absl::MutexLock lock(&mu_);
  return has_epoch_;
}

uint64_t ChunkReducer::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

IncompleteSteps ChunkReducer::incomplete_steps() const {
  IncompleteSteps steps;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, chunk] : chunks_) {
    for (const auto& [step, inputs] : chunk->steps) {
      if (inputs->received > 0) steps.Add(step, inputs->covered);
    }
  }
  return steps;
}

absl::Time ChunkReducer::last_push() const {
  absl::MutexLock lock(&mu_);
  return last_push_;
}

uint64_t ChunkReducer::superseded_chunks() const {
  absl::MutexLock lock(&mu_);
  return superseded_chunks_;
}

size_t ChunkReducer::pending_chunks() const {
  absl::MutexLock lock(&mu_);
  return pending_chunks_;
}

uint64_t ChunkReducer::pending_bytes() const {
  absl::MutexLock lock(&mu_);
  return pending_bytes_;
}

size_t ChunkReducer::deferred_pushes() const {
  absl::MutexLock lock(&mu_);
  return deferred_.size();
}

}  // namespace gift::server
