#include "worker/engine/chunk_sender.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_mac.h"
#include "common/dataplane/chunk_rng_key.h"
#include "worker/engine/step_failure.h"
#include "worker/engine/tensor_buffers.h"

namespace gift::worker {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

ChunkHeader OwnChunkHeader(ChunkKind kind, const StepPlan& plan, const TensorStep& t,
                           uint32_t chunk_index) {
  return ChunkHeader{.kind = kind,
                     .epoch = plan.epoch,
                     .step = plan.step,
                     .tensor_id = t.tensor_id,
                     .basis_version = t.basis_version,
                     .chunk_index = chunk_index,
                     .rank = plan.rank,
                     .world_size = plan.world_size};
}

absl::StatusOr<transport::PeerId> ChunkSender::ConnectToServer(const std::string& address) {
  auto peer = connections_.Get(transport_, address);
  if (!peer.ok()) {
    return AggregatorFailure("cannot reach an aggregator", address, peer.status().message());
  }
  if (auto s = inbox_.UseServer(*peer, address); !s.ok()) return s;
  return *peer;
}

absl::StatusOr<transport::PeerId> ChunkSender::ConnectToNodeMate(const std::string& address) {
  auto peer = connections_.Get(transport_, address);
  if (!peer.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach a worker of the node group (", address,
                                               "): ", peer.status().message()));
  }
  inbox_.UseNodeMate(*peer);
  return *peer;
}

absl::Status ChunkSender::Send(transport::PeerId peer, absl::Span<const uint8_t> header,
                               absl::Span<const uint8_t> payload, ChunkSlot* slot,
                               std::shared_ptr<const void> owned, bool to_server, uint64_t run,
                               const char* what) {
  const uint64_t serial = inbox_.SendStarted(slot, peer, to_server);
  ResultInbox* inbox = &inbox_;
  const absl::Status s = transport_.Send(
      peer, header, payload,
      [inbox, slot, serial, run, peer, what, owned = std::move(owned)](const absl::Status& done) {
        inbox->SendEnded(slot, serial, run, peer, done, what);
      });
  if (s.ok()) return s;
  inbox_.SendEnded(slot, serial, run, peer, absl::OkStatus(), what);  // never started
  return inbox_.SendFailure(peer, what, s.message());
}

absl::Status ChunkSender::PushChunk(const StepPlan& plan, const TensorStep& t,
                                    TensorCodecStage& stage, ChunkSlot& slot,
                                    transport::PeerId peer, uint64_t run, StepReport& report) {
  const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
  auto view = codec::StartPayload(t.push_spec, dims, slot.send);
  absl::Status s = view.status();
  if (s.ok()) {
    s = stage.EncodeChunk(slot.offset, *view,
                          dataplane::ChunkRngKey(t.tensor_id, slot.index, plan.step, plan.rank));
  }
  if (!s.ok()) return InTensor(s, t.tensor_id, slot.index);
  codec::FinishPayload(slot.send);
  report.CountPushed(slot.tensor, slot.send.size());
  const ChunkHeader header = OwnChunkHeader(ChunkKind::kPush, plan, t, slot.index);
  if (plan.keys == nullptr) {
    const auto plain = dataplane::SerializeChunkHeader(header);
    return Send(peer, plain, slot.send, &slot, nullptr, /*to_server=*/true, run, "push failed");
  }
  auto sealed =
      dataplane::SealChunk(header, plan.rank, slot.send, plan.keys->own, plan.keys->algorithm);
  if (!sealed.ok()) return sealed.status();
  return Send(peer, *sealed, slot.send, &slot, nullptr, /*to_server=*/true, run, "push failed");
}

absl::Status ChunkSender::PushNodeSum(const StepPlan& plan, const TensorStep& t, const float* sum,
                                      uint32_t ranks_summed, ChunkSlot& slot,
                                      transport::PeerId peer, uint64_t run, StepReport& report) {
  const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
  auto view = codec::StartPayload(t.push_spec, dims, slot.send);
  if (!view.ok()) return view.status();
  if (auto s = codec::Encode(sum, *view,
                             dataplane::ChunkRngKey(t.tensor_id, slot.index, plan.step, plan.rank),
                             codec_options_);
      !s.ok()) {
    return s;
  }
  codec::FinishPayload(slot.send);
  report.CountPushed(slot.tensor, slot.send.size());
  ChunkHeader header = OwnChunkHeader(ChunkKind::kNodePush, plan, t, slot.index);
  header.set_ranks_summed(ranks_summed);
  if (plan.keys == nullptr) {
    const auto plain = dataplane::SerializeChunkHeader(header);
    return Send(peer, plain, slot.send, &slot, nullptr, /*to_server=*/true, run,
                "node push failed");
  }
  auto sealed =
      dataplane::SealChunk(header, plan.rank, slot.send, plan.keys->own, plan.keys->algorithm);
  if (!sealed.ok()) return sealed.status();
  return Send(peer, *sealed, slot.send, &slot, nullptr, /*to_server=*/true, run,
              "node push failed");
}

absl::Status ChunkSender::SendToLeader(const StepPlan& plan, const TensorStep& t, const float* x,
                                       const ChunkSlot& slot, transport::PeerId peer, uint64_t run,
                                       StepReport& report) {
  const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
  const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
  auto size = codec::PayloadSizeFor(fp32, dims);
  if (!size.ok()) return size.status();
  auto payload = std::make_shared<std::vector<uint8_t>>(*size);
  auto view = codec::StartPayload(fp32, dims, absl::MakeSpan(*payload));
  if (!view.ok()) return view.status();
  if (auto s = codec::Encode(x + slot.offset, *view, {}, codec_options_); !s.ok()) return s;
  codec::FinishPayload(absl::MakeSpan(*payload));
  report.node_bytes_sent += payload->size();
  // Sealed with the node's key: the leader holds no other worker's own.
  const ChunkHeader h = OwnChunkHeader(ChunkKind::kNodeMember, plan, t, slot.index);
  std::shared_ptr<const std::vector<uint8_t>> header;
  if (plan.keys == nullptr) {
    const auto plain = dataplane::SerializeChunkHeader(h);
    header = std::make_shared<const std::vector<uint8_t>>(plain.begin(), plain.end());
  } else {
    if (!plan.keys->node.has_value()) {
      return absl::FailedPreconditionError("no node key to seal a chunk to the leader with");
    }
    auto sealed =
        dataplane::SealChunk(h, plan.rank, *payload, *plan.keys->node, plan.keys->algorithm);
    if (!sealed.ok()) return sealed.status();
    header = std::make_shared<const std::vector<uint8_t>>(sealed->begin(), sealed->end());
  }
  const absl::Span<const uint8_t> header_bytes(*header), payload_bytes(*payload);
  std::shared_ptr<const void> owned =
      std::make_shared<std::pair<decltype(header), decltype(payload)>>(std::move(header),
                                                                       std::move(payload));
  return Send(peer, header_bytes, payload_bytes, nullptr, std::move(owned), /*to_server=*/false,
              run, "a send to the node group failed");
}

}  // namespace gift::worker
