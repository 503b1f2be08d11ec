#include "server/aggregator/chunk_reducer.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/reduce.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

absl::StatusOr<std::unique_ptr<ChunkReducer>> ChunkReducer::Create(
    const ChunkReducerOptions& options) {
  if (auto s = codec::Validate(options.pull_spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("pull codec: ", s.message()));
  }
  return std::unique_ptr<ChunkReducer>(new ChunkReducer(options));
}

absl::StatusOr<EpochUpdate> ChunkReducer::SetEpoch(
    uint64_t epoch, uint32_t world_size, absl::flat_hash_map<ChunkId, ChunkShape> chunks) {
  if (world_size == 0) return absl::InvalidArgumentError("world size 0");
  EpochUpdate update;
  {
    absl::MutexLock lock(&mu_);
    if (has_epoch_ && epoch <= epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("epoch ", epoch, " is not above the current epoch ", epoch_));
    }
    for (const auto& [key, pending] : pending_) {
      ChunkHeader h;
      h.kind = ChunkKind::kAbort;
      h.epoch = epoch_;
      std::tie(h.step, h.tensor_id, h.chunk_index) = key;
      h.basis_version = pending.basis_version;
      h.rank = pending.received;
      h.world_size = world_size_;
      h.status_code = static_cast<uint32_t>(absl::StatusCode::kAborted);
      update.aborted.push_back(h);
    }
    pending_.clear();
    pending_bytes_ = 0;
    has_epoch_ = true;
    epoch_ = epoch;
    world_size_ = world_size;
    chunks_ = std::move(chunks);
  }
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
      if (it != chunks_.end() && it->second != shape) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", id.second, " of tensor ", id.first,
                                                       " changed shape within epoch ", epoch));
      }
    }
    for (const auto& [id, shape] : chunks) chunks_[id] = shape;
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

absl::StatusOr<std::optional<ReducedChunk>> ChunkReducer::AddPush(const ChunkHeader& header,
                                                                  std::vector<uint8_t> payload) {
  if (header.kind != ChunkKind::kPush) {
    return absl::InvalidArgumentError(absl::StrCat("not a push: ", dataplane::ToString(header)));
  }
  // Parse (checksum, layout, contents) before taking the lock.
  auto parsed = codec::ParsePayload(payload, options_.payload_limits);
  if (!parsed.ok()) {
    return absl::Status(
        parsed.status().code(),
        absl::StrCat(dataplane::ToString(header), ": payload: ", parsed.status().message()));
  }
  const ChunkShape got{parsed->view.rows, parsed->view.cols};
  const Key key{header.step, header.tensor_id, header.chunk_index};
  ChunkShape shape;
  std::vector<Contribution> complete;
  codec::CodecSpec pull_spec;
  {
    absl::MutexLock lock(&mu_);
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
    shape = chunk->second;
    if (got != shape) {
      return absl::InvalidArgumentError(absl::StrCat(dataplane::ToString(header), ": payload is ",
                                                     got.rows, "x", got.cols, ", chunk is ",
                                                     shape.rows, "x", shape.cols));
    }
    auto [it, inserted] = pending_.try_emplace(key);
    Pending& p = it->second;
    if (inserted) {
      p.basis_version = header.basis_version;
      p.contributions.resize(world_size_);
    } else if (p.basis_version != header.basis_version) {
      return absl::FailedPreconditionError(absl::StrCat(
          dataplane::ToString(header), ": basis version ", header.basis_version,
          " differs from version ", p.basis_version, " of the ranks already received"));
    }
    if (!p.contributions[header.rank].bytes.empty()) {
      return absl::AlreadyExistsError(
          absl::StrCat(dataplane::ToString(header), ": rank already contributed"));
    }
    pending_bytes_ += payload.size();
    p.contributions[header.rank] = {.bytes = std::move(payload), .view = parsed->view};
    if (++p.received < world_size_) return std::nullopt;
    complete = std::move(p.contributions);
    for (const Contribution& c : complete) pending_bytes_ -= c.bytes.size();
    pending_.erase(it);
    pull_spec = pull_spec_;
  }
  auto reduced = Reduce(header, shape, complete, pull_spec);
  if (!reduced.ok()) return reduced.status();
  return std::optional<ReducedChunk>(*std::move(reduced));
}

absl::StatusOr<ReducedChunk> ChunkReducer::Reduce(const ChunkHeader& last, const ChunkShape& shape,
                                                  const std::vector<Contribution>& contributions,
                                                  const codec::CodecSpec& pull_spec) const {
  const auto start = std::chrono::steady_clock::now();
  std::vector<codec::EncodedView> views;
  views.reserve(contributions.size());
  bool exact = true;
  for (const Contribution& c : contributions) {
    views.push_back(c.view);
    exact = exact && c.view.spec.format == codec::Format::kF32;
  }
  auto out = codec::EncodedTensor::Create(
      exact ? codec::CodecSpec{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone}
            : pull_spec,
      shape.rows, shape.cols);
  if (!out.ok()) return out.status();
  std::vector<float> sum(shape.rows * shape.cols);
  const codec::RngKey key{.tensor = last.tensor_id, .step = last.step, .rank = 0};
  if (auto s =
          codec::ReduceEncoded(views, sum.data(), 1.0f / static_cast<float>(contributions.size()),
                               out->mutable_view(), key, options_.codec_options);
      !s.ok()) {
    return s;
  }
  const uint64_t dims[] = {shape.rows, shape.cols};
  auto bytes = codec::SerializePayload(out->view(), dims);
  if (!bytes.ok()) return bytes.status();
  ReducedChunk result;
  result.header = last;
  result.header.kind = ChunkKind::kResult;
  result.header.rank = static_cast<uint32_t>(contributions.size());
  result.payload = *std::move(bytes);
  result.elements = shape.rows * shape.cols;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
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
  return pending_.size();
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
