#include "server/aggregator/chunk_reducer.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/codec/reduce.h"
#include "common/dataplane/chunk_rng_key.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

namespace reducer_internal {

// One rank's push of one step.
struct Slot {
  enum class State { kEmpty, kPlaced, kReceived };
  State state = State::kEmpty;
  ReusableBuffer buffer;    // the payload's bytes (capacity kept across steps)
  codec::EncodedView view;  // into `buffer`, once received
};

// The pushes of one (step, chunk), by rank.
struct StepInputs {
  uint64_t step = 0;
  uint64_t basis_version = 0;  // of the first push received
  uint32_t received = 0;       // ranks counted (a node sum counts its group)
  std::vector<Slot> slots;
  std::vector<uint8_t> covered;  // by rank: counted
};

struct ChunkState {
  explicit ChunkState(ChunkShape s) : shape(s) {}
  const ChunkShape shape;
  // Open steps (usually one) and closed ones kept for reuse, buffers and all.
  absl::flat_hash_map<uint64_t, std::unique_ptr<StepInputs>> steps;
  std::vector<std::unique_ptr<StepInputs>> spare;
  // Send buffers of results; one is free when nothing else holds it.
  std::vector<std::shared_ptr<ReusableBuffer>> results;
};

}  // namespace reducer_internal

using reducer_internal::ChunkState;
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
      pull_spec_(options.pull_spec) {}

absl::StatusOr<std::unique_ptr<ChunkReducer>> ChunkReducer::Create(
    const ChunkReducerOptions& options) {
  if (auto s = codec::Validate(options.pull_spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pull codec: ", s.message()));
  }
  return std::unique_ptr<ChunkReducer>(new ChunkReducer(options));
}

void ChunkReducer::ResetChunkLocked(ChunkState& chunk, const ChunkId& id,
                                    std::vector<ChunkHeader>* aborted) {
  for (auto& [step, inputs] : chunk.steps) {
    if (inputs->received > 0) {
      ChunkHeader h;
      h.kind = ChunkKind::kAbort;
      h.epoch = epoch_;
      h.step = step;
      h.tensor_id = id.first;
      h.chunk_index = id.second;
      h.basis_version = inputs->basis_version;
      h.set_ranks_summed(inputs->received);
      h.world_size = world_size_;
      h.status_code = static_cast<uint32_t>(absl::StatusCode::kAborted);
      aborted->push_back(h);
      --pending_chunks_;
    }
    for (Slot& slot : inputs->slots) {
      if (slot.state == Slot::State::kPlaced) {
        orphans_.push_back(std::move(slot.buffer));  // the transport may still write it
      } else if (slot.state == Slot::State::kReceived) {
        pending_bytes_ -= slot.buffer.size();
      }
      slot.state = Slot::State::kEmpty;
    }
    inputs->received = 0;
    chunk.spare.push_back(std::move(inputs));
  }
  chunk.steps.clear();
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
    for (auto& [id, state] : chunks_) ResetChunkLocked(*state, id, &update.aborted);
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
  std::vector<Deferred> ready;
  {
    absl::MutexLock lock(&mu_);
    std::vector<Deferred> keep;
    for (Deferred& d : deferred_) {
      if (d.header.epoch < epoch_) {
        deferred_bytes_ -= d.payload.size();
        update.refused.push_back(absl::FailedPreconditionError(
            absl::StrCat(dataplane::ToString(d.header), ": deferred push of epoch ", d.header.epoch,
                         ", which ended before this shard served it (epoch ", epoch_, ")")));
      } else if (!MustDeferLocked(d.header)) {
        deferred_bytes_ -= d.payload.size();
        ready.push_back(std::move(d));
      } else {
        keep.push_back(std::move(d));
      }
    }
    deferred_ = std::move(keep);
  }
  for (Deferred& d : ready) {
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
    absl::flat_hash_map<uint64_t, codec::CodecSpec> specs) {
  for (const auto& [tensor, spec] : specs) {
    if (auto s = codec::Validate(spec); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull codec of tensor ", tensor, ": ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  tensor_pull_specs_ = std::move(specs);
  return absl::OkStatus();
}

codec::CodecSpec ChunkReducer::pull_spec(uint64_t tensor_id) const {
  absl::MutexLock lock(&mu_);
  auto it = tensor_pull_specs_.find(tensor_id);
  return it == tensor_pull_specs_.end() ? pull_spec_ : it->second;
}

StepInputs& ChunkReducer::OpenStepLocked(ChunkState& chunk, uint64_t step) {
  auto it = chunk.steps.find(step);
  if (it != chunk.steps.end()) return *it->second;
  std::unique_ptr<StepInputs> inputs;
  if (!chunk.spare.empty()) {
    inputs = std::move(chunk.spare.back());
    chunk.spare.pop_back();
  } else {
    inputs = std::make_unique<StepInputs>();
  }
  inputs->step = step;
  inputs->received = 0;
  inputs->slots.resize(world_size_);
  inputs->covered.assign(world_size_, 0);
  StepInputs& ref = *inputs;
  chunk.steps.emplace(step, std::move(inputs));
  return ref;
}

void ChunkReducer::RecycleIfUnusedLocked(ChunkState& chunk, uint64_t step) {
  auto it = chunk.steps.find(step);
  if (it == chunk.steps.end() || it->second->received > 0) return;
  for (const Slot& slot : it->second->slots) {
    if (slot.state != Slot::State::kEmpty) return;
  }
  chunk.spare.push_back(std::move(it->second));
  chunk.steps.erase(it);
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

namespace {

absl::Status CheckVersion(const ChunkHeader& header, const StepInputs& inputs) {
  if (inputs.received > 0 && inputs.basis_version != header.basis_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        dataplane::ToString(header), ": basis version ", header.basis_version,
        " differs from version ", inputs.basis_version, " of the ranks already received"));
  }
  return absl::OkStatus();
}

}  // namespace

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
  if (inputs.received < world_size_) return std::nullopt;
  auto it = chunk.steps.find(header.step);
  ReductionJob job;
  job.header_ = header;
  job.shape_ = chunk.shape;
  auto tensor_spec = tensor_pull_specs_.find(header.tensor_id);
  job.pull_spec_ = tensor_spec == tensor_pull_specs_.end() ? pull_spec_ : tensor_spec->second;
  job.chunk_ = chunks_.at(ChunkId{header.tensor_id, header.chunk_index});
  job.inputs_ = std::move(it->second);
  chunk.steps.erase(it);
  for (const Slot& s : job.inputs_->slots) pending_bytes_ -= s.buffer.size();
  --pending_chunks_;
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
  StepInputs& inputs = OpenStepLocked(*chunk->second, header.step);
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
  RecycleIfUnusedLocked(*chunk, header.step);
}

absl::StatusOr<std::optional<ReductionJob>> ChunkReducer::AcceptPlaced(
    const ChunkHeader& header, absl::Span<const uint8_t> placed) {
  // The placed bytes stay put while their slot (or orphan) holds them, so
  // they are parsed before taking the lock.
  auto parsed = codec::ParsePayload(placed, options_.payload_limits);
  absl::MutexLock lock(&mu_);
  // The slot stays placed (and reachable for ReleaseMemory).
  if (closed_) return absl::UnavailableError("the reducer is shutting down");
  ChunkState* chunk = nullptr;
  absl::StatusOr<Slot*> found = TakePlacedLocked(header, placed, &chunk);
  if (!found.ok()) return found.status();
  Slot* slot = *found;
  auto refuse = [&](const absl::Status& why) {
    slot->state = Slot::State::kEmpty;
    RecycleIfUnusedLocked(*chunk, header.step);
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
                                                                 std::vector<uint8_t> payload) {
  if (header.kind != ChunkKind::kPush && header.kind != ChunkKind::kNodePush) {
    return absl::InvalidArgumentError(absl::StrCat("not a push: ", dataplane::ToString(header)));
  }
  // Parse (checksum, layout, contents) before taking the lock.
  auto parsed = codec::ParsePayload(payload, options_.payload_limits);
  if (!parsed.ok()) return WithHeader(header, parsed.status(), "payload: ");
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("the reducer is shutting down");
  if (MustDeferLocked(header)) {
    if (deferred_bytes_ + payload.size() > options_.max_deferred_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(dataplane::ToString(header), ": ", deferred_bytes_,
                       " bytes of pushes already wait for an epoch or chunk this shard does "
                       "not know yet"));
    }
    deferred_bytes_ += payload.size();
    deferred_.push_back({.header = header, .payload = std::move(payload)});
    return std::nullopt;
  }
  auto chunk = CheckPushLocked(header, ChunkShape{parsed->view.rows, parsed->view.cols});
  if (!chunk.ok()) return chunk.status();
  StepInputs& inputs = OpenStepLocked(**chunk, header.step);
  if (auto s = CheckVersion(header, inputs); !s.ok()) {
    RecycleIfUnusedLocked(**chunk, header.step);
    return s;
  }
  Slot& slot = inputs.slots[header.rank];
  if (slot.state != Slot::State::kEmpty) {
    return absl::AlreadyExistsError(
        absl::StrCat(dataplane::ToString(header), ": rank already contributed"));
  }
  auto ranks = nodes_.Cover(header, absl::MakeSpan(inputs.covered));
  if (!ranks.ok()) {
    RecycleIfUnusedLocked(**chunk, header.step);
    return ranks.status();
  }
  // Into the slot, and the view moved with the bytes.
  slot.buffer.Resize(payload.size(), registry_);
  std::memcpy(slot.buffer.data(), payload.data(), payload.size());
  codec::EncodedView view = parsed->view;
  const auto rebase = [&](const uint8_t* p) {
    return p == nullptr ? nullptr : slot.buffer.data() + (p - payload.data());
  };
  view.codes = rebase(view.codes);
  view.scales = rebase(view.scales);
  return StoreLocked(header, **chunk, inputs, view, *ranks);
}

absl::StatusOr<ChunkResult> ChunkReducer::Reduce(ReductionJob job) {
  const auto start = std::chrono::steady_clock::now();
  StepInputs& inputs = *job.inputs_;
  ChunkState& chunk = *job.chunk_;
  const ChunkHeader& last = job.header_;
  absl::InlinedVector<codec::EncodedView, 8> views;
  bool exact = true;
  for (uint32_t r = 0; r < inputs.slots.size(); ++r) {
    const Slot& slot = inputs.slots[r];
    if (slot.state != Slot::State::kReceived) continue;  // counted in a node sum
    views.push_back(slot.view);
    exact = exact && slot.view.spec.format == codec::Format::kF32;
  }
  const size_t world = inputs.slots.size();
  const codec::CodecSpec out_spec =
      exact ? codec::CodecSpec{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone}
            : job.pull_spec_;
  const uint64_t dims[] = {job.shape_.rows, job.shape_.cols};
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
  absl::Status status;
  auto size = codec::PayloadSizeFor(out_spec, dims);
  if (!size.ok()) {
    status = size.status();
  } else {
    out->Resize(*size, registry_);
    out->Register();
    auto view = codec::StartPayload(out_spec, dims, out->span());
    thread_local std::vector<float> scratch;
    const uint64_t need = codec::ReduceScratchFloats(job.shape_.cols);
    if (scratch.size() < need) scratch.resize(need);
    status = view.status();
    if (status.ok()) {
      codec::CodecOptions codec_options = options_.codec_options;
      status = codec::ReduceEncodedBlocked(
          views, 1.0f / static_cast<float>(world), *view, absl::MakeSpan(scratch),
          dataplane::ChunkRngKey(last.tensor_id, last.chunk_index, last.step,
                                 dataplane::kResultRngRank),
          codec_options);
    }
    if (status.ok()) codec::FinishPayload(out->span());
  }
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
  for (auto& [id, chunk] : closed.chunks) {
    auto unregister = [](StepInputs& inputs) {
      for (Slot& slot : inputs.slots) slot.buffer.Unregister();
    };
    for (auto& [step, inputs] : chunk->steps) unregister(*inputs);
    for (auto& inputs : chunk->spare) unregister(*inputs);
    for (auto& result : chunk->results) result->Unregister();
  }
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
