// PushPullEngine's node-local aggregation (node_group.h, push_pull_engine.h
// StepPlan::node): members send their chunks to the chunk's leader, leaders
// push the group's sum.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_rng_key.h"
#include "worker/push_pull_engine.h"
#include "worker/push_pull_engine_internal.h"
#include "worker/tensor_buffers.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

// Contributions held for later steps, at most (a member runs at most a step
// or two ahead of its leader; beyond this they are dropped as strays).
constexpr uint64_t kMaxNodeInboxBytes = uint64_t{256} << 20;

std::vector<uint8_t> HeaderBytes(const ChunkHeader& h) {
  const auto plain = dataplane::SerializeChunkHeader(h);
  return {plain.begin(), plain.end()};
}

}  // namespace

absl::Status PushPullEngine::BeginNodeStep(const StepPlan& step) {
  if (step.node != nullptr && step.keys != nullptr) {
    return absl::UnimplementedError(
        "node-local aggregation (policy hierarchy NODE) with data-plane authentication is not "
        "implemented: workers hold no keys of each other");
  }
  if (step.node != nullptr &&
      (step.node->self != step.rank ||
       !std::binary_search(step.node->ranks.begin(), step.node->ranks.end(), step.rank))) {
    return absl::InvalidArgumentError("the node group does not hold this worker's rank");
  }
  node_sums_.Reset(step.node);
  absl::MutexLock lock(&mu_);
  // Contributions of ended epochs will never be summed.
  std::erase_if(node_inbox_, [&](const NodeContribution& c) {
    if (c.header.epoch >= step.epoch) return false;
    node_inbox_bytes_ -= c.payload.size();
    return true;
  });
  ++node_arrivals_;  // the next drain files what is held for this step
  return absl::OkStatus();
}

void PushPullEngine::FileNodeContributionLocked(const ChunkHeader& header,
                                                transport::Message& message) {
  if (active_ && inflight_.keys != nullptr) {  // never summed unauthenticated
    ++auth_failures_[std::string(dataplane::AuthFailureName(dataplane::AuthFailure::kUnknownKey))];
    return;
  }
  if ((active_ && header.epoch < inflight_.epoch) ||
      node_inbox_bytes_ + message.bytes().size() > kMaxNodeInboxBytes) {
    ++stray_;
    return;
  }
  node_inbox_bytes_ += message.bytes().size();
  std::vector<uint8_t> payload =
      message.placed.data() == nullptr
          ? std::move(message.payload)
          : std::vector<uint8_t>(message.placed.begin(), message.placed.end());
  node_inbox_.push_back({.header = header, .payload = std::move(payload)});
  ++node_arrivals_;
}

absl::Status PushPullEngine::SendOwned(transport::PeerId peer, std::vector<uint8_t> header,
                                       std::shared_ptr<const std::vector<uint8_t>> payload,
                                       uint64_t epoch, uint64_t step) {
  auto owned_header = std::make_shared<const std::vector<uint8_t>>(std::move(header));
  {
    absl::MutexLock lock(&mu_);
    ++sends_in_flight_;
  }
  const absl::Status s =
      transport_->Send(peer, *owned_header, *payload,
                       [this, owned_header, payload, epoch, step](const absl::Status& done) {
                         absl::MutexLock lock(&mu_);
                         --sends_in_flight_;
                         if (!done.ok() && active_ && inflight_.epoch == epoch &&
                             inflight_.step == step && inflight_.aborted.ok()) {
                           inflight_.aborted = absl::UnavailableError(
                               absl::StrCat("a send to the node group failed: ", done.message()));
                         }
                       });
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    --sends_in_flight_;
    return absl::UnavailableError(absl::StrCat("a send to the node group failed: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status PushPullEngine::RouteNodeChunk(const StepPlan& plan, size_t i, size_t c,
                                            const float* x, transport::PeerId peer,
                                            StepReport& report) {
  const TensorStep& t = plan.tensors[i];
  const ChunkSlot& slot = step_buffers_[i]->chunks()[c];
  const uint64_t elements = slot.shape.rows * slot.shape.cols;
  // The stage writes the transformed rows as they are reached.
  if (auto s = step_buffers_[i]->stage().PrepareRange(slot.offset, elements); !s.ok()) return s;
  if (plan.node->LeaderOf(t.tensor_id, slot.index) == plan.rank) {
    node_sums_.Lead({t.tensor_id, slot.index}, x + slot.offset, elements, (i << 32) | c);
    return absl::OkStatus();
  }
  // A member: its chunk in FP32 to the leader.
  const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
  const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
  auto size = codec::PayloadSizeFor(fp32, dims);
  if (!size.ok()) return size.status();
  auto payload = std::make_shared<std::vector<uint8_t>>(*size);
  auto view = codec::StartPayload(fp32, dims, absl::MakeSpan(*payload));
  if (!view.ok()) return view.status();
  if (auto s = codec::Encode(x + slot.offset, *view, {}, options_.codec_options); !s.ok()) return s;
  codec::FinishPayload(absl::MakeSpan(*payload));
  report.node_bytes_sent += payload->size();
  const ChunkHeader header =
      engine_internal::OwnChunkHeader(ChunkKind::kNodeMember, plan, t, slot.index);
  return SendOwned(peer, HeaderBytes(header), std::move(payload), plan.epoch, plan.step);
}

absl::Status PushPullEngine::PushNodeSums(const StepPlan& plan, StepReport& report) {
  std::vector<NodeContribution> arrived;
  {
    absl::MutexLock lock(&mu_);
    node_seen_ = node_arrivals_;
    std::erase_if(node_inbox_, [&](NodeContribution& c) {
      if (c.header.epoch != plan.epoch || c.header.step != plan.step) return false;
      node_inbox_bytes_ -= c.payload.size();
      arrived.push_back(std::move(c));
      return true;
    });
  }
  for (NodeContribution& c : arrived) {
    if (c.header.world_size != plan.world_size) {
      ++stray_;  // of another world: cannot be this epoch's
      continue;
    }
    if (auto s = node_sums_.Offer(std::move(c)); !s.ok()) {
      absl::MutexLock lock(&mu_);
      ++stray_;
    }
  }
  for (const NodeSums::Key& key : node_sums_.Ready()) {
    auto taken = node_sums_.TakeSum(key, node_scratch_, options_.codec_options);
    if (!taken.ok()) return taken.status();
    const size_t cookie = *taken;
    const size_t i = cookie >> 32, c = cookie & 0xffffffffu;
    const TensorStep& t = plan.tensors[i];
    ChunkSlot& slot = step_buffers_[i]->chunks()[c];
    const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
    auto view = codec::StartPayload(t.push_spec, dims, slot.send);
    if (!view.ok()) return view.status();
    if (auto s =
            codec::Encode(node_scratch_.data(), *view,
                          dataplane::ChunkRngKey(t.tensor_id, slot.index, plan.step, plan.rank),
                          options_.codec_options);
        !s.ok()) {
      return s;
    }
    codec::FinishPayload(slot.send);
    report.bytes_pushed += slot.send.size();
    ChunkHeader header = engine_internal::OwnChunkHeader(ChunkKind::kNodePush, plan, t, slot.index);
    header.set_ranks_summed(static_cast<uint32_t>(plan.node->size()));
    const auto header_bytes = dataplane::SerializeChunkHeader(header);
    {
      absl::MutexLock lock(&mu_);
      slot.send_in_flight = true;
      ++sends_in_flight_;
    }
    ChunkSlot* sending = &slot;
    const uint64_t epoch = plan.epoch, step = plan.step;
    const absl::Status s = transport_->Send(
        step_peers_[i][c], header_bytes, slot.send,
        [this, sending, epoch, step](const absl::Status& done) {
          absl::MutexLock lock(&mu_);
          sending->send_in_flight = false;
          --sends_in_flight_;
          if (!done.ok() && active_ && inflight_.epoch == epoch && inflight_.step == step &&
              inflight_.aborted.ok()) {
            inflight_.aborted =
                absl::UnavailableError(absl::StrCat("node push failed: ", done.message()));
          }
        });
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      slot.send_in_flight = false;
      --sends_in_flight_;
      return absl::UnavailableError(absl::StrCat("node push failed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::worker
