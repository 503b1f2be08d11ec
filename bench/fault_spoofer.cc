#include "bench/fault_spoofer.h"

#include <array>
#include <future>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/control/coordinator_client.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_rng_key.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transport/ucx/ucx_transport.h"

namespace gift::bench {

absl::StatusOr<std::unique_ptr<FaultSpoofer>> FaultSpoofer::Create() {
  absl::StatusOr<std::unique_ptr<transport::Transport>> t =
      transport::CreateUcxTransport({.on_receive = [](transport::Message) {}});
  if (!t.ok()) return t.status();
  return std::unique_ptr<FaultSpoofer>(new FaultSpoofer(*std::move(t)));
}

absl::StatusOr<int> FaultSpoofer::SendForgedPushes(const std::string& coordinator_address,
                                                   uint64_t tensor_id, uint64_t step,
                                                   uint32_t forged_rank, float value) {
  control::CoordinatorClient client(control::CoordinatorClient::MakeChannel(coordinator_address),
                                    absl::Seconds(10));
  absl::StatusOr<gift::v1::StatusResponse> status = client.GetStatus();
  if (!status.ok()) return status.status();
  const gift::v1::ClusterState& state = status->state();
  const gift::v1::TensorInfo* tensor = nullptr;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.tensor_id() == tensor_id) tensor = &t;
  }
  if (tensor == nullptr || tensor->shape().empty()) {
    return absl::NotFoundError(absl::StrCat("no tensor ", tensor_id));
  }
  uint64_t total = 1;
  for (int64_t d : tensor->shape()) total *= static_cast<uint64_t>(d);
  const uint64_t cols = static_cast<uint64_t>(tensor->shape(tensor->shape_size() - 1));
  std::map<uint32_t, transport::PeerId> servers;  // by shard id
  for (const gift::v1::Member& s : state.servers()) {
    absl::StatusOr<transport::PeerId> peer = transport_->Connect(s.data_address());
    if (!peer.ok()) return peer.status();
    servers[s.rank()] = *peer;
  }
  absl::StatusOr<codec::CodecSpec> fp32 = codec::ParseCodecSpec("fp32");
  if (!fp32.ok()) return fp32.status();
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::array<uint8_t, dataplane::kChunkHeaderBytes>> headers;
  std::vector<std::pair<transport::PeerId, size_t>> sends;
  for (const gift::v1::Chunk& c : state.shard_map().chunks()) {
    if (c.tensor_id() != tensor_id || !servers.contains(c.server_rank())) continue;
    absl::StatusOr<dataplane::ChunkShape> shape =
        dataplane::ChunkShapeOf(total, cols, c.offset(), c.num_elements());
    if (!shape.ok()) return shape.status();
    const uint64_t dims[] = {shape->rows, shape->cols};
    absl::StatusOr<uint64_t> size = codec::PayloadSizeFor(*fp32, dims);
    if (!size.ok()) return size.status();
    std::vector<uint8_t>& payload = payloads.emplace_back(*size);
    absl::StatusOr<codec::MutableEncodedView> view =
        codec::StartPayload(*fp32, dims, absl::MakeSpan(payload));
    if (!view.ok()) return view.status();
    const std::vector<float> x(c.num_elements(), value);
    if (absl::Status s = codec::Encode(
            x.data(), *view, dataplane::ChunkRngKey(tensor_id, c.index(), step, forged_rank));
        !s.ok()) {
      return s;
    }
    codec::FinishPayload(absl::MakeSpan(payload));
    headers.push_back(dataplane::SerializeChunkHeader(
        {.kind = dataplane::ChunkKind::kPush,
         .epoch = state.epoch(),
         .step = step,
         .tensor_id = tensor_id,
         .basis_version = 0,
         .chunk_index = c.index(),
         .rank = forged_rank,
         .world_size = static_cast<uint32_t>(state.workers_size())}));
    sends.emplace_back(servers[c.server_rank()], payloads.size() - 1);
  }
  std::vector<std::future<absl::Status>> done;
  for (size_t i = 0; i < sends.size(); ++i) {
    auto promise = std::make_shared<std::promise<absl::Status>>();
    done.push_back(promise->get_future());
    const auto& [peer, p] = sends[i];
    absl::Status s = transport_->Send(peer, headers[i], payloads[p],
                                      [promise](const absl::Status& s) { promise->set_value(s); });
    if (!s.ok()) promise->set_value(s);
  }
  int sent = 0;
  for (auto& d : done) sent += d.get().ok() ? 1 : 0;
  return sent;
}

}  // namespace gift::bench
