// The result side of the push-pull engine (push_pull_engine.h): results
// placed straight into their slots as they arrive (PlacePayload, OnMessage on
// the transport's progress thread, which only files them) and decoded on the
// Run thread as they come in (DecodeArrived, DrainArrivals).
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "worker/push_pull_engine.h"
#include "worker/push_pull_engine_internal.h"
#include "worker/tensor_buffers.h"

namespace gift::worker {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;
using engine_internal::Annotate;
using engine_internal::Clock;
using engine_internal::SecondsSince;

absl::Span<uint8_t> PushPullEngine::PlacePayload(absl::Span<const uint8_t> header, size_t bytes) {
  auto h = dataplane::ParseChunkHeader(header);
  absl::MutexLock lock(&mu_);
  if (!h.ok() || h->kind != ChunkKind::kResult || !active_ || h->epoch != inflight_.epoch ||
      h->step != inflight_.step) {
    return {};
  }
  // Only a header sealed by a server of the epoch may land in a slot.
  if (inflight_.keys != nullptr &&
      dataplane::CheckChunk(*inflight_.keys, *h, header, std::nullopt).has_value()) {
    return {};
  }
  auto it = inflight_.slots.find({h->tensor_id, h->chunk_index});
  if (it == inflight_.slots.end()) return {};
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

void PushPullEngine::OnMessage(transport::Message message) {
  auto header = dataplane::ParseChunkHeader(message.header);
  // The chunk tag is checked outside the lock (it reads the whole payload).
  std::optional<dataplane::AuthFailure> auth_failure;
  std::shared_ptr<const dataplane::EpochKeys> keys;
  if (header.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (active_) keys = inflight_.keys;
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
    return FileNodeContributionLocked(*header, message);  // of this step or a later one
  }
  if (!header.ok() || !active_ || header->epoch != inflight_.epoch ||
      header->step != inflight_.step) {
    ++stray_;
    return;
  }
  if (inflight_.keys != keys) {  // a step began meanwhile (rare): check under its keys
    auth_failure =
        inflight_.keys == nullptr
            ? std::nullopt
            : dataplane::CheckChunk(*inflight_.keys, *header, message.header, message.bytes());
  }
  if (auth_failure.has_value()) {
    ++auth_failures_[std::string(
        dataplane::AuthFailureName(auth_failure.value_or(dataplane::AuthFailure::kMissing)))];
    if (placed_into != nullptr) placed_into->placed = false;  // free for the real result
    return;
  }
  if (header->kind == ChunkKind::kAbort) {
    if (inflight_.aborted.ok()) {
      const absl::Span<const uint8_t> why = message.bytes();
      inflight_.aborted = absl::AbortedError(
          absl::StrCat("an aggregator aborted step ", header->step, " of epoch ", header->epoch,
                       ": ", std::string(why.begin(), why.end())));
    }
    return;
  }
  auto it = inflight_.slots.find({header->tensor_id, header->chunk_index});
  if (header->kind != ChunkKind::kResult || it == inflight_.slots.end() || it->second->arrived) {
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
  inflight_.ready.push_back(&slot);
  --inflight_.remaining;
}

absl::Status PushPullEngine::DecodeArrived(const StepPlan& plan, ChunkSlot& slot,
                                           StepReport& report) {
  const TensorStep& t = plan.tensors[slot.tensor];
  TensorBuffers& buffers = *step_buffers_[slot.tensor];
  const absl::Span<const uint8_t> bytes = slot.result_bytes_view();
  report.bytes_pulled += bytes.size();
  // With data-plane keys, OnMessage let in only results whose MAC verified.
  auto parsed = codec::ParsePayload(
      bytes, {},
      plan.keys != nullptr ? codec::ChecksumCheck::kCoveredByMac : codec::ChecksumCheck::kVerify);
  absl::Status s = parsed.status();
  if (s.ok() && (parsed->view.rows != slot.shape.rows || parsed->view.cols != slot.shape.cols)) {
    s = absl::InvalidArgumentError(absl::StrCat("result is ", parsed->view.rows, "x",
                                                parsed->view.cols, ", chunk is ", slot.shape.rows,
                                                "x", slot.shape.cols));
  }
  if (s.ok()) s = buffers.stage().DecodeChunk(parsed->view, slot.offset);
  if (!s.ok()) {
    return Annotate(absl::Status(s.code(), absl::StrCat("result: ", s.message())), t.tensor_id,
                    slot.index);
  }
  if (--buffers.chunks_left == 0) {
    return Annotate(buffers.stage().FinishDecode(), t.tensor_id);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PushPullEngine::DrainArrivals(const StepPlan& plan, bool wait,
                                                   absl::Time deadline, StepReport& report) {
  {
    absl::MutexLock lock(&mu_);
    if (wait) {
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !inflight_.ready.empty() || inflight_.remaining == 0 || !inflight_.aborted.ok() ||
               node_arrivals_ != node_seen_;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&woken), deadline)) return false;
    }
    if (plan.node == nullptr) node_seen_ = node_arrivals_;  // nothing to sum this step
    // Once every result is in, the step completed at every server (a server
    // sends a chunk's result only when all ranks pushed it), so a late
    // abort (e.g. this worker saw the next epoch first) no longer fails it.
    if (!inflight_.aborted.ok() && inflight_.remaining > 0) return inflight_.aborted;
    draining_.clear();
    draining_.swap(inflight_.ready);
  }
  const auto start = Clock::now();
  for (ChunkSlot* slot : draining_) {
    if (auto s = DecodeArrived(plan, *slot, report); !s.ok()) return s;
  }
  report.decode_seconds += SecondsSince(start);
  if (plan.node != nullptr) {
    if (auto s = PushNodeSums(plan, report); !s.ok()) return s;
  }
  return true;
}

}  // namespace gift::worker
