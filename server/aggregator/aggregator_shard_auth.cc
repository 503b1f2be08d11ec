// AggregatorShard's data-plane authentication (aggregator_shard.h, docs/design.md
// section 8.2): checking pushes, holding those whose keys are not here yet,
// sealing what the shard sends, and counting failures.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/aggregator/aggregator_shard.h"

namespace gift::server {
namespace {

using dataplane::AuthFailure;
using dataplane::ChunkHeader;

// Pushes held for their epoch's keys, at most (and at most the reducer's
// max_deferred_bytes of payload).
constexpr size_t kMaxHeldPushes = 4096;

}  // namespace

absl::Status AggregatorShard::CheckEpochKeys(const ShardEpoch& epoch) const {
  if (options_.auth == ShardAuth::kOff) return absl::OkStatus();
  if (epoch.keys != nullptr && epoch.keys->epoch != epoch.epoch) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", epoch.epoch, " with the keys of epoch ", epoch.keys->epoch));
  }
  absl::MutexLock lock(&mu_);
  const bool on = options_.auth == ShardAuth::kOn || authenticate_.value_or(false);
  if (on && epoch.keys == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", epoch.epoch, " without data-plane keys (authentication is on)"));
  }
  return absl::OkStatus();
}

void AggregatorShard::InstallEpochKeys(const ShardEpoch& epoch) {
  if (options_.auth == ShardAuth::kOff) return;
  absl::MutexLock lock(&mu_);
  if (epoch.keys == nullptr) {
    if (!authenticate_.has_value()) authenticate_ = false;
    return;
  }
  authenticate_ = true;
  if (keys_ == nullptr || keys_->epoch != epoch.keys->epoch) previous_keys_ = std::move(keys_);
  keys_ = epoch.keys;
  keys_world_size_ = static_cast<uint32_t>(epoch.workers.size());
}

bool AggregatorShard::MayPlace(const ChunkHeader& header,
                               absl::Span<const uint8_t> header_bytes) const {
  if (options_.auth == ShardAuth::kOff) return true;
  std::shared_ptr<const dataplane::EpochKeys> keys;
  {
    absl::MutexLock lock(&mu_);
    if (authenticate_ == false) return true;
    keys = keys_;
  }
  // Without the epoch's keys the push is held (OnMessage), which needs it
  // unplaced; a header that does not verify is dropped there.
  return keys != nullptr && keys->epoch == header.epoch &&
         !dataplane::CheckChunk(*keys, header, header_bytes, std::nullopt).has_value();
}

std::optional<codec::ChecksumCheck> AggregatorShard::Authenticate(const ChunkHeader& header,
                                                                  transport::Message& message) {
  if (options_.auth == ShardAuth::kOff) return codec::ChecksumCheck::kVerify;
  std::shared_ptr<const dataplane::EpochKeys> keys;
  uint32_t world_size = 0;
  {
    absl::MutexLock lock(&mu_);
    if (authenticate_ == false) return codec::ChecksumCheck::kVerify;
    keys = keys_;  // null until the first keyed epoch (or while undecided)
    world_size = keys_world_size_;
  }
  const bool placed = message.placed.data() != nullptr;
  if (keys == nullptr || header.epoch > keys->epoch) {
    // An epoch this shard has no keys of yet (a worker saw it first).
    Hold(header, message);
    return std::nullopt;
  }
  if (header.epoch < keys->epoch) {
    if (placed) reducer_->DiscardPlaced(header, message.placed);
    Reject(absl::FailedPreconditionError(
        absl::StrCat(dataplane::ToString(header), ": of an ended epoch")));
    return std::nullopt;
  }
  if (auto failure = dataplane::CheckChunk(*keys, header, message.header, message.bytes())) {
    // The key of a worker of this epoch that the session has not fetched
    // yet (a re-joined server, or a worker admitted while the keys were
    // being built): held until the keys with it are installed.
    if (*failure == AuthFailure::kUnknownKey &&
        dataplane::AwaitsSignerKey(*keys, header, message.header, world_size)) {
      Hold(header, message);
      return std::nullopt;
    }
    if (placed) reducer_->DiscardPlaced(header, message.placed);
    CountAuthFailure(*failure, header, message.from);
    return std::nullopt;
  }
  return codec::ChecksumCheck::kCoveredByMac;  // the chunk tag covered the payload
}

void AggregatorShard::Hold(const ChunkHeader& header, transport::Message& message) {
  // Never placed (MayPlace refuses what does not verify), so the bytes are
  // the message's own.
  if (message.placed.data() != nullptr) {
    reducer_->DiscardPlaced(header, message.placed);
    CountAuthFailure(AuthFailure::kUnknownKey, header, message.from);
    return;
  }
  const size_t size = message.payload.size();
  {
    absl::MutexLock lock(&mu_);
    if (held_.size() < kMaxHeldPushes &&
        held_bytes_ + size <= options_.reducer.max_deferred_bytes) {
      held_bytes_ += size;
      held_.push_back(std::move(message));
      return;
    }
  }
  Reject(absl::ResourceExhaustedError(
      absl::StrCat(dataplane::ToString(header), ": too many pushes wait for their keys")));
}

void AggregatorShard::ReplayHeld() {
  if (options_.auth == ShardAuth::kOff) return;
  absl::ReaderMutexLock receiving(&receiving_mu_);
  std::vector<transport::Message> held;
  {
    absl::MutexLock lock(&mu_);
    if (held_.empty()) return;
    held.swap(held_);
    held_bytes_ = 0;
  }
  for (transport::Message& m : held) {
    auto header = dataplane::ParseChunkHeader(m.header);
    if (header.ok()) Process(*header, std::move(m));  // parsed once already
  }
}

void AggregatorShard::CountAuthFailure(AuthFailure failure, const ChunkHeader& header,
                                       transport::PeerId from) {
  uint64_t unreported = 0;
  bool report = false;
  {
    absl::MutexLock lock(&mu_);
    ++rejections_[absl::StatusCodeToString(absl::StatusCode::kUnauthenticated)];
    AuthFailureCount& count = auth_failures_[std::string(dataplane::AuthFailureName(failure))];
    ++count.total;
    report = count.report.Due(options_.auth_report_interval, &unreported);
  }
  if (report && options_.on_auth_failure) {
    options_.on_auth_failure(dataplane::AuthFailureStatus(failure, header), from, unreported);
  }
}

size_t AggregatorShard::deferred_pushes() const {
  size_t held = 0;
  {
    absl::MutexLock lock(&mu_);
    held = held_.size();
  }
  return reducer_->deferred_pushes() + held;
}

std::map<std::string, uint64_t> AggregatorShard::auth_failures() const {
  std::map<std::string, uint64_t> out;
  for (AuthFailure f : dataplane::kAllAuthFailures) out[std::string(dataplane::AuthFailureName(f))];
  absl::MutexLock lock(&mu_);
  for (const auto& [reason, count] : auth_failures_) out[reason] = count.total;
  return out;
}

std::vector<uint8_t> AggregatorShard::HeaderFor(const ChunkHeader& header,
                                                absl::Span<const uint8_t> payload) const {
  std::shared_ptr<const dataplane::EpochKeys> keys;
  {
    absl::MutexLock lock(&mu_);
    if (options_.auth == ShardAuth::kOff || authenticate_ == false) {
      const auto bytes = dataplane::SerializeChunkHeader(header);
      return {bytes.begin(), bytes.end()};
    }
    for (const auto& k : {keys_, previous_keys_}) {
      if (k != nullptr && k->epoch == header.epoch) keys = k;
    }
  }
  if (keys == nullptr) return {};
  auto sealed = dataplane::SealChunk(header, keys->signer, payload, keys->own, keys->algorithm);
  if (!sealed.ok()) return {};
  return {sealed->begin(), sealed->end()};
}

}  // namespace gift::server
