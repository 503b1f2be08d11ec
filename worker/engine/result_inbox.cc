#include "worker/engine/result_inbox.h"

#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dataplane/chunk_header.h"
#include "worker/engine/step_failure.h"
#include "worker/engine/tensor_buffers.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

}  // namespace

void ResultInbox::Open(uint64_t epoch, uint64_t step, uint64_t run,
                       std::shared_ptr<const dataplane::EpochKeys> keys, bool node_step) {
  absl::MutexLock lock(&mu_);
  epoch_ = epoch;
  step_ = step;
  run_ = run;
  node_step_ = node_step;
  keys_ = std::move(keys);
  servers_.clear();
  pushed_ = false;
  slots_.clear();
  ready_.clear();
  remaining_ = 0;
  aborted_ = absl::OkStatus();
  aborted_for_newer_epoch_ = false;
  // Planned from a state a newer one replaced.
  if (epoch < newest_epoch_) AbortForNewerEpochLocked(newest_epoch_why_);
  server_aborted_ = false;
  expect_no_more_ = false;
  // Only a retry of the same step under a later epoch may use an earlier
  // attempt.
  if (earlier_.has_value() && (earlier_->step != step || earlier_->epoch >= epoch)) {
    earlier_.reset();
  }
  active_ = true;
  node_.DropEpochsBefore(epoch);
  if (node_step) node_.Wake();  // the next Take files what is held for this step
}

absl::Status ResultInbox::UseServer(transport::PeerId peer, const std::string& address) {
  absl::MutexLock lock(&mu_);
  servers_.try_emplace(peer, address);
  // Reported failed between the cache lookup and now: the step cannot use it.
  if (failed_peers_.contains(peer)) {
    return AggregatorFailure("an aggregator failed", address, "its connection was reported failed");
  }
  return absl::OkStatus();
}

void ResultInbox::UseNodeMate(transport::PeerId peer) {
  absl::MutexLock lock(&mu_);
  node_.AddMate(peer);
}

bool ResultInbox::Expect(absl::Span<ChunkSlot* const> slots, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  // A send buffer is rewritten only once its previous send completed.
  auto sent = [slots]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const ChunkSlot* slot : slots) {
      if (slot->send_in_flight) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&sent), timeout)) return false;
  // Results of these chunks can only come once this worker pushed them, so
  // filing the slots now, before the pushes, loses nothing.
  for (ChunkSlot* slot : slots) {
    slot->placed = false;
    slot->arrived = false;
    slot->result_bytes = 0;
    slots_[{slot->tensor_id, slot->index}] = slot;
  }
  remaining_ += slots.size();
  return true;
}

std::vector<ChunkSlot*> ResultInbox::StalledSends(absl::Span<ChunkSlot* const> slots) const {
  absl::MutexLock lock(&mu_);
  std::vector<ChunkSlot*> stalled;
  for (ChunkSlot* slot : slots) {
    if (slot->send_in_flight && !servers_.contains(slot->send_peer) &&
        !node_.IsMate(slot->send_peer)) {
      stalled.push_back(slot);
    }
  }
  return stalled;
}

void ResultInbox::DetachSends(TensorBuffers& buffers) {
  absl::MutexLock lock(&mu_);
  for (ChunkSlot& slot : buffers.chunks()) {
    if (!slot.send_in_flight) continue;
    slot.send_in_flight = false;
    ++slot.send_serial;  // its SendEnded no longer matches
    ++slot.detached_sends;
  }
}

bool ResultInbox::DetachedSendsEnded(TensorBuffers& buffers) const {
  absl::MutexLock lock(&mu_);
  return absl::c_none_of(buffers.chunks(),
                         [](const ChunkSlot& slot) { return slot.detached_sends > 0; });
}

void ResultInbox::ExpectNoMore() {
  absl::MutexLock lock(&mu_);
  expect_no_more_ = true;
  AdoptEarlierAttemptLocked();
}

absl::StatusOr<bool> ResultInbox::Take(bool wait, absl::Time deadline,
                                       std::vector<ChunkSlot*>& ready) {
  ready.clear();
  absl::MutexLock lock(&mu_);
  if (wait) {
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !ready_.empty() || remaining_ == 0 || !aborted_.ok() || node_.unseen();
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&woken), deadline)) return false;
  }
  if (!node_step_) node_.MarkSeen();  // nothing to sum this step
  // Once every result is in, the step completed at every server (a server
  // sends a chunk's result only when all ranks pushed it), so a late abort
  // (e.g. this worker saw the next epoch first) no longer fails it.
  if (!aborted_.ok() && remaining_ > 0) return aborted_;
  ready.swap(ready_);
  return true;
}

bool ResultInbox::complete() const {
  absl::MutexLock lock(&mu_);
  return remaining_ == 0 && ready_.empty();
}

size_t ResultInbox::missing() const {
  absl::MutexLock lock(&mu_);
  return remaining_;
}

absl::Status ResultInbox::IncompleteAbort() const {
  absl::MutexLock lock(&mu_);
  return remaining_ > 0 ? aborted_ : absl::OkStatus();
}

bool ResultInbox::pushed() const {
  absl::MutexLock lock(&mu_);
  return pushed_;
}

std::vector<ChunkSlot*> ResultInbox::Close(absl::Span<ChunkSlot* const> slots) {
  std::vector<ChunkSlot*> grow;
  absl::MutexLock lock(&mu_);
  KeepEarlierAttemptLocked();
  active_ = false;
  for (ChunkSlot* slot : slots) {
    // A result too big for its slot was handed over by the transport: size
    // the slot for the next step.
    if (!slot->unplaced.empty() && !slot->Busy() && slot->unplaced.size() > slot->result.size()) {
      grow.push_back(slot);
    }
  }
  return grow;
}

uint64_t ResultInbox::SendStarted(ChunkSlot* slot, transport::PeerId peer, bool to_server) {
  absl::MutexLock lock(&mu_);
  ++sends_in_flight_;
  if (to_server) pushed_ = true;
  if (slot == nullptr) return 0;
  slot->send_in_flight = true;
  slot->send_peer = peer;
  return ++slot->send_serial;
}

void ResultInbox::SendEnded(ChunkSlot* slot, uint64_t serial, uint64_t run, transport::PeerId peer,
                            const absl::Status& done, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  if (slot != nullptr) {
    if (serial == slot->send_serial) {
      slot->send_in_flight = false;
    } else {
      --slot->detached_sends;  // a send DetachSends gave up waiting for
    }
  }
  --sends_in_flight_;
  if (!done.ok() && active_ && run_ == run && aborted_.ok()) {
    aborted_ = SendFailureLocked(peer, what, done.message());
  }
}

absl::Status ResultInbox::SendFailure(transport::PeerId peer, absl::string_view what,
                                      absl::string_view why) const {
  absl::MutexLock lock(&mu_);
  return SendFailureLocked(peer, what, why);
}

absl::Status ResultInbox::SendFailureLocked(transport::PeerId peer, absl::string_view what,
                                            absl::string_view why) const {
  auto it = servers_.find(peer);
  if (it != servers_.end()) return AggregatorFailure(what, it->second, why);
  return absl::UnavailableError(absl::StrCat(what, ": ", why));
}

void ResultInbox::AwaitSends(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sends_in_flight_ == 0; };
  (void)mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

bool ResultInbox::Idle(const TensorBuffers& buffers) const {
  absl::MutexLock lock(&mu_);
  for (const ChunkSlot& c : buffers.chunks()) {
    if (c.Busy()) return false;
  }
  return true;
}

std::vector<NodeContribution> ResultInbox::TakeNodeContributions(uint64_t epoch, uint64_t step) {
  absl::MutexLock lock(&mu_);
  return node_.Take(epoch, step);
}

void ResultInbox::CountStray() {
  absl::MutexLock lock(&mu_);
  ++stray_;
}

void ResultInbox::CountAuthFailure(dataplane::AuthFailure failure) {
  absl::MutexLock lock(&mu_);
  CountAuthFailureLocked(failure);
}

void ResultInbox::CountAuthFailureLocked(dataplane::AuthFailure failure) {
  ++auth_failures_[std::string(dataplane::AuthFailureName(failure))];
}

absl::Span<uint8_t> ResultInbox::PlacePayload(absl::Span<const uint8_t> header, size_t bytes) {
  auto h = dataplane::ParseChunkHeader(header);
  absl::MutexLock lock(&mu_);
  if (!h.ok() || h->kind != ChunkKind::kResult || !active_ || h->epoch != epoch_ ||
      h->step != step_) {
    return {};
  }
  // Only a header sealed by a server of the epoch may land in a slot.
  if (keys_ != nullptr && dataplane::CheckChunk(*keys_, *h, header, std::nullopt).has_value()) {
    return {};
  }
  auto it = slots_.find({h->tensor_id, h->chunk_index});
  if (it == slots_.end()) return {};
  ChunkSlot& slot = *it->second;
  // Never over live data: not twice in a step, not while an earlier
  // placement into the slot may still be landing.
  if (slot.placed || slot.arrived || slot.placement_outstanding || slot.result.size() < bytes) {
    return {};
  }
  slot.placed = true;
  slot.placement_outstanding = true;
  outstanding_[slot.result.data()] = &slot;
  return absl::MakeSpan(slot.result.data(), bytes);
}

void ResultInbox::OnMessage(transport::Message message) {
  auto header = dataplane::ParseChunkHeader(message.header);
  // The chunk tag is checked outside the lock (it reads the whole payload).
  std::optional<dataplane::AuthFailure> auth_failure;
  std::shared_ptr<const dataplane::EpochKeys> keys;
  if (header.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (active_) keys = keys_;
    }
    if (keys != nullptr) {
      auth_failure = dataplane::CheckChunk(*keys, *header, message.header, message.bytes());
    }
  }
  absl::MutexLock lock(&mu_);
  ChunkSlot* placed_into = nullptr;
  if (message.placed.data() != nullptr) {
    if (auto it = outstanding_.find(message.placed.data()); it != outstanding_.end()) {
      placed_into = it->second;
      placed_into->placement_outstanding = false;
      outstanding_.erase(it);
    }
  }
  if (header.ok() && header->kind == ChunkKind::kNodeMember) {
    // Checked now when the step in flight has keys of the chunk's epoch (a
    // forgery never takes room here), else when taken (NodeLeaderRoute).
    if (auth_failure.has_value() && keys_ == keys && header->epoch == epoch_) {
      CountAuthFailureLocked(*auth_failure);
      return;
    }
    // Of this step or a later one.
    if (!node_.Hold(*header, message, active_ ? std::optional<uint64_t>(epoch_) : std::nullopt)) {
      ++stray_;
    }
    return;
  }
  if (header.ok() && earlier_.has_value() && header->epoch == earlier_->epoch &&
      header->step == earlier_->step &&
      (header->kind == ChunkKind::kResult || header->kind == ChunkKind::kAbort) &&
      placed_into == nullptr) {
    return FileEarlierLocked(*header, message);
  }
  if (!header.ok() || !active_ || header->epoch != epoch_ || header->step != step_) {
    ++stray_;
    return;
  }
  if (keys_ != keys) {  // a step began meanwhile (rare): check under its keys
    auth_failure = keys_ == nullptr
                       ? std::nullopt
                       : dataplane::CheckChunk(*keys_, *header, message.header, message.bytes());
  }
  if (auth_failure.has_value()) {
    CountAuthFailureLocked(*auth_failure);
    if (placed_into != nullptr) placed_into->placed = false;  // free for the real result
    return;
  }
  if (header->kind == ChunkKind::kAbort) {
    server_aborted_ = true;
    if (aborted_.ok()) {
      const absl::Span<const uint8_t> why = message.bytes();
      aborted_ = absl::AbortedError(absl::StrCat("an aggregator aborted step ", header->step,
                                                 " of epoch ", header->epoch, ": ",
                                                 std::string(why.begin(), why.end())));
    }
    return;
  }
  auto it = slots_.find({header->tensor_id, header->chunk_index});
  if (header->kind != ChunkKind::kResult || it == slots_.end() || it->second->arrived) {
    ++stray_;
    return;
  }
  ChunkSlot& slot = *it->second;
  if (placed_into != nullptr && placed_into != &slot) {  // cannot happen: placed by this header
    ++stray_;
    return;
  }
  slot.placed = placed_into != nullptr;
  slot.result_bytes = message.bytes().size();
  if (!slot.placed) slot.unplaced = std::move(message.payload);
  slot.arrived = true;
  ready_.push_back(&slot);
  --remaining_;
}

void ResultInbox::OnPeerFailure(transport::PeerId peer, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  // Another worker of the node group: its death ends its epoch, not this
  // step by itself (see StepPlan::node).
  if (node_.ForgetMate(peer)) return;
  failed_peers_.insert(peer);
  // Only a connection the step pushes to ends it: a report about another
  // one (a server of an earlier epoch, a connection attempt made for an
  // earlier step) says nothing about this step's servers.
  if (!active_ || !aborted_.ok()) return;
  auto it = servers_.find(peer);
  if (it == servers_.end()) return;
  ++peer_failures_that_aborted_;
  aborted_ = AggregatorFailure("an aggregator failed", it->second, why.message());
}

void ResultInbox::AbortEpochsBefore(uint64_t epoch, absl::string_view why) {
  absl::MutexLock lock(&mu_);
  // The latest state's, not the highest ever: a coordinator that starts
  // over with a new state file numbers its epochs from the start again.
  newest_epoch_ = epoch;
  newest_epoch_why_ = std::string(why);
  if (active_ && epoch_ < epoch && aborted_.ok()) AbortForNewerEpochLocked(why);
}

void ResultInbox::AbortForNewerEpochLocked(absl::string_view why) {
  aborted_ = absl::AbortedError(absl::StrCat("step ", step_, " of epoch ", epoch_, ": ", why));
  aborted_for_newer_epoch_ = true;
}

void ResultInbox::AbortStep(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (active_ && aborted_.ok() && !why.ok()) aborted_ = std::move(why);
}

absl::Status ResultInbox::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

uint64_t ResultInbox::stray_messages() const {
  absl::MutexLock lock(&mu_);
  return stray_;
}

uint64_t ResultInbox::peer_failures() const {
  absl::MutexLock lock(&mu_);
  return failed_peers_.size();
}

uint64_t ResultInbox::peer_failures_that_aborted() const {
  absl::MutexLock lock(&mu_);
  return peer_failures_that_aborted_;
}

void ResultInbox::KeepEarlierAttemptLocked() {
  if (!active_ || !aborted_for_newer_epoch_ || server_aborted_ || slots_.empty()) return;
  // A retry given up in turn: the first attempt is the one that may have
  // completed for the others (nobody pushes a step again once they have its
  // results), so it stays.
  if (earlier_.has_value() && earlier_->step == step_) return;
  EarlierAttempt attempt{.epoch = epoch_, .step = step_, .keys = keys_};
  for (const auto& [key, slot] : slots_) {
    attempt.chunks.insert(key);
    // Results that came before the step was given up: copied, since the
    // retry reuses the slots.
    if (slot->arrived) {
      const absl::Span<const uint8_t> bytes = slot->result_bytes_view();
      attempt.results[key].assign(bytes.begin(), bytes.end());
    }
  }
  earlier_ = std::move(attempt);
}

void ResultInbox::FileEarlierLocked(const ChunkHeader& header, transport::Message& message) {
  if (earlier_->keys != nullptr) {
    if (auto failure =
            dataplane::CheckChunk(*earlier_->keys, header, message.header, message.bytes())) {
      return CountAuthFailureLocked(*failure);
    }
  }
  if (header.kind == ChunkKind::kAbort) {  // it never completes, for anyone
    earlier_.reset();
    return;
  }
  const std::pair<uint64_t, uint32_t> key{header.tensor_id, header.chunk_index};
  if (!earlier_->chunks.contains(key) || earlier_->results.contains(key)) {
    ++stray_;
    return;
  }
  earlier_->results[key] = std::move(message.payload);
  AdoptEarlierAttemptLocked();
}

void ResultInbox::AdoptEarlierAttemptLocked() {
  if (!earlier_.has_value() || !active_ || !expect_no_more_ || step_ != earlier_->step ||
      epoch_ <= earlier_->epoch || remaining_ != slots_.size() || !ready_.empty() ||
      slots_.size() != earlier_->chunks.size() ||
      earlier_->results.size() != earlier_->chunks.size()) {
    return;
  }
  for (const auto& [key, slot] : slots_) {
    if (!earlier_->results.contains(key) || slot->arrived || slot->placement_outstanding) return;
  }
  for (auto& [key, slot] : slots_) {
    slot->unplaced = std::move(earlier_->results[key]);
    slot->placed = false;
    slot->result_bytes = slot->unplaced.size();
    slot->arrived = true;
    ready_.push_back(slot);
  }
  remaining_ = 0;
  ++earlier_epoch_completions_;
  earlier_.reset();
}

uint64_t ResultInbox::earlier_epoch_completions() const {
  absl::MutexLock lock(&mu_);
  return earlier_epoch_completions_;
}

std::string ResultInbox::DroppedSoFar() const {
  absl::MutexLock lock(&mu_);
  uint64_t unauthenticated = 0;
  std::vector<std::string> reasons;
  for (const auto& [reason, n] : auth_failures_) {
    if (n == 0) continue;
    unauthenticated += n;
    reasons.push_back(absl::StrCat(reason, " ", n));
  }
  if (stray_ == 0 && unauthenticated == 0) return "";
  std::string out =
      absl::StrCat("dropped so far: ", stray_, " stray, ", unauthenticated, " unauthenticated");
  if (!reasons.empty()) absl::StrAppend(&out, " (", absl::StrJoin(reasons, ", "), ")");
  return out;
}

std::map<std::string, uint64_t> ResultInbox::auth_failures() const {
  std::map<std::string, uint64_t> out;
  for (dataplane::AuthFailure f : dataplane::kAllAuthFailures) {
    out[std::string(dataplane::AuthFailureName(f))];
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [reason, count] : auth_failures_) out[reason] = count;
  return out;
}

}  // namespace gift::worker
