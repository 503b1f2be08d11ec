#include "worker/push_pull_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_shape.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks one tensor's plan; returns its chunks' shapes in the order given.
absl::StatusOr<std::vector<dataplane::ChunkShape>> CheckTensor(const TensorStep& t) {
  const std::string name = absl::StrCat("tensor ", t.tensor_id);
  if (t.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": null buffer"));
  if (t.rows == 0 || t.cols == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty shape"));
  }
  if (t.transform != nullptr && (static_cast<uint64_t>(t.transform->d_out()) != t.rows ||
                                 static_cast<uint64_t>(t.transform->d_in()) != t.cols)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": transform shape ", t.transform->d_out(),
                                                   "x", t.transform->d_in(), " is not ", t.rows,
                                                   "x", t.cols));
  }
  const uint64_t total = t.rows * t.cols;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<dataplane::ChunkShape> shapes;
  std::vector<uint32_t> indices;
  for (const ChunkRoute& c : t.chunks) {
    auto shape = dataplane::ChunkShapeOf(total, t.cols, c.offset, c.num_elements);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", shape.status().message()));
    }
    shapes.push_back(*shape);
    spans.emplace_back(c.offset, c.num_elements);
    indices.push_back(c.index);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [offset, n] : spans) {
    if (offset != covered) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": chunks do not tile the tensor (gap or overlap at ", covered, ")"));
    }
    covered += n;
  }
  if (covered != total) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": chunks cover ", covered, " of ", total, " elements"));
  }
  std::sort(indices.begin(), indices.end());
  if (std::adjacent_find(indices.begin(), indices.end()) != indices.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": duplicate chunk index"));
  }
  return shapes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PushPullEngine>> PushPullEngine::Create(
    const TransportFactory& make_transport, const PushPullEngineOptions& options) {
  if (!make_transport) return absl::InvalidArgumentError("no transport factory");
  std::unique_ptr<PushPullEngine> engine(new PushPullEngine(options));
  PushPullEngine* self = engine.get();
  auto transport =
      make_transport({.on_receive = [self](transport::Message m) { self->OnMessage(std::move(m)); },
                      .on_peer_failure =
                          [self](transport::PeerId peer, const absl::Status& why) {
                            self->connections_.Forget(peer);
                            absl::MutexLock lock(&self->mu_);
                            if (self->active_ && self->inflight_.aborted.ok()) {
                              self->inflight_.aborted = absl::UnavailableError(
                                  absl::StrCat("an aggregator failed: ", why.message()));
                            }
                          }});
  if (!transport.ok()) return transport.status();
  engine->transport_ = *std::move(transport);
  return engine;
}

PushPullEngine::~PushPullEngine() { transport_.reset(); }

std::string PushPullEngine::address() const { return transport_->address(); }

uint64_t PushPullEngine::stray_messages() const {
  absl::MutexLock lock(&mu_);
  return stray_;
}

void PushPullEngine::AbortEpochsBefore(uint64_t epoch, absl::string_view why) {
  absl::MutexLock lock(&mu_);
  if (active_ && inflight_.epoch < epoch && inflight_.aborted.ok()) {
    inflight_.aborted = absl::AbortedError(
        absl::StrCat("step ", inflight_.step, " of epoch ", inflight_.epoch, ": ", why));
  }
}

absl::StatusOr<transport::PeerId> PushPullEngine::PeerFor(const std::string& address) {
  auto peer = connections_.Get(*transport_, address);
  if (!peer.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach an aggregator: ", peer.status().message()));
  }
  return *peer;
}

void PushPullEngine::OnMessage(transport::Message message) {
  auto header = dataplane::ParseChunkHeader(message.header);
  absl::MutexLock lock(&mu_);
  if (!header.ok() || !active_ || header->epoch != inflight_.epoch ||
      header->step != inflight_.step) {
    ++stray_;
    return;
  }
  if (header->kind == ChunkKind::kAbort) {
    if (inflight_.aborted.ok()) {
      inflight_.aborted = absl::AbortedError(
          absl::StrCat("an aggregator aborted step ", header->step, " of epoch ", header->epoch,
                       ": ", std::string(message.payload.begin(), message.payload.end())));
    }
    return;
  }
  auto slot = inflight_.slots.find({header->tensor_id, header->chunk_index});
  if (header->kind != ChunkKind::kResult || slot == inflight_.slots.end() ||
      inflight_.arrived[slot->second]) {
    ++stray_;
    return;
  }
  inflight_.results[slot->second] = std::move(message.payload);
  inflight_.arrived[slot->second] = true;
  --inflight_.remaining;
}

absl::StatusOr<StepReport> PushPullEngine::Run(const StepPlan& plan) {
  if (plan.world_size == 0 || plan.rank >= plan.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", plan.rank, " of world size ", plan.world_size));
  }
  if (auto s = codec::Validate(plan.push_spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("push codec: ", s.message()));
  }
  std::vector<std::vector<dataplane::ChunkShape>> shapes;
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, size_t> slots;
  for (const TensorStep& t : plan.tensors) {
    auto s = CheckTensor(t);
    if (!s.ok()) return s.status();
    shapes.push_back(*std::move(s));
    for (const ChunkRoute& c : t.chunks) {
      if (!slots.emplace(std::make_pair(t.tensor_id, c.index), slots.size()).second) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", t.tensor_id, " appears twice"));
      }
    }
  }
  // Connections first: Connect waits for the progress thread.
  std::vector<std::vector<transport::PeerId>> peers(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    for (const ChunkRoute& c : plan.tensors[i].chunks) {
      auto peer = PeerFor(c.server);
      if (!peer.ok()) return peer.status();
      peers[i].push_back(*peer);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    inflight_ = Inflight{.epoch = plan.epoch, .step = plan.step};
    inflight_.results.resize(slots.size());
    inflight_.arrived.assign(slots.size(), false);
    inflight_.remaining = slots.size();
    inflight_.slots = std::move(slots);
    active_ = true;
  }
  auto finish = [this] {
    absl::MutexLock lock(&mu_);
    active_ = false;
  };

  StepReport report;
  auto start = std::chrono::steady_clock::now();
  // Transformed gradients (kept for the decode), by tensor; empty for direct.
  std::vector<std::vector<float>> scratch(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    const float* src = t.data;
    if (t.transform != nullptr) {
      scratch[i].resize(t.rows * t.cols);
      if (auto s = t.transform->Forward(t.data, static_cast<int64_t>(t.rows),
                                        static_cast<int64_t>(t.cols), scratch[i].data());
          !s.ok()) {
        finish();
        return absl::Status(s.code(), absl::StrCat("tensor ", t.tensor_id, ": ", s.message()));
      }
      src = scratch[i].data();
    }
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      const ChunkRoute& route = t.chunks[c];
      const dataplane::ChunkShape& shape = shapes[i][c];
      auto encoded = codec::EncodedTensor::Create(plan.push_spec, shape.rows, shape.cols);
      absl::Status s = encoded.status();
      if (s.ok()) {
        s = codec::Encode(
            src + route.offset, encoded->mutable_view(),
            {.tensor = (t.tensor_id << 24) | route.index, .step = plan.step, .rank = plan.rank},
            options_.codec_options);
      }
      const uint64_t dims[] = {shape.rows, shape.cols};
      absl::StatusOr<std::vector<uint8_t>> bytes =
          s.ok() ? codec::SerializePayload(encoded->view(), dims) : s;
      if (!bytes.ok()) {
        finish();
        return absl::Status(bytes.status().code(),
                            absl::StrCat("tensor ", t.tensor_id, " chunk ", route.index, ": ",
                                         bytes.status().message()));
      }
      auto payload = std::make_shared<std::vector<uint8_t>>(*std::move(bytes));
      report.bytes_pushed += payload->size();
      const ChunkHeader header{.kind = ChunkKind::kPush,
                               .epoch = plan.epoch,
                               .step = plan.step,
                               .tensor_id = t.tensor_id,
                               .basis_version = t.basis_version,
                               .chunk_index = route.index,
                               .rank = plan.rank,
                               .world_size = plan.world_size};
      const uint64_t epoch = plan.epoch, step = plan.step;
      s = transport_->Send(peers[i][c], dataplane::SerializeChunkHeader(header), *payload,
                           [this, payload, epoch, step](const absl::Status& done) {
                             if (done.ok()) return;
                             absl::MutexLock lock(&mu_);
                             if (active_ && inflight_.epoch == epoch && inflight_.step == step &&
                                 inflight_.aborted.ok()) {
                               inflight_.aborted = absl::UnavailableError(
                                   absl::StrCat("push failed: ", done.message()));
                             }
                           });
      if (!s.ok()) {
        finish();
        return absl::UnavailableError(absl::StrCat("push failed: ", s.message()));
      }
    }
  }
  report.encode_seconds = SecondsSince(start);

  start = std::chrono::steady_clock::now();
  std::vector<std::vector<uint8_t>> results;
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, size_t> result_slots;
  {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return inflight_.remaining == 0 || !inflight_.aborted.ok();
    };
    const bool complete = mu_.AwaitWithTimeout(absl::Condition(&done), options_.timeout);
    active_ = false;
    if (!inflight_.aborted.ok()) return inflight_.aborted;
    if (!complete) {
      return absl::DeadlineExceededError(
          absl::StrCat("step ", plan.step, " of epoch ", plan.epoch, ": ", inflight_.remaining,
                       " of ", inflight_.results.size(), " chunks missing after ",
                       absl::FormatDuration(options_.timeout)));
    }
    results = std::move(inflight_.results);
    result_slots = std::move(inflight_.slots);
  }
  report.wait_seconds = SecondsSince(start);

  // Decode everything before writing any buffer, so a bad result leaves all
  // buffers as they were.
  start = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> averages(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    averages[i].resize(t.rows * t.cols);
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      const ChunkRoute& route = t.chunks[c];
      const std::vector<uint8_t>& bytes = results[result_slots.at({t.tensor_id, route.index})];
      report.bytes_pulled += bytes.size();
      auto parsed = codec::ParsePayload(bytes);
      absl::Status s = parsed.status();
      if (s.ok() &&
          (parsed->view.rows != shapes[i][c].rows || parsed->view.cols != shapes[i][c].cols)) {
        s = absl::InvalidArgumentError(absl::StrCat("result is ", parsed->view.rows, "x",
                                                    parsed->view.cols, ", chunk is ",
                                                    shapes[i][c].rows, "x", shapes[i][c].cols));
      }
      if (s.ok()) {
        s = codec::Decode(parsed->view, averages[i].data() + route.offset, options_.codec_options);
      }
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("tensor ", t.tensor_id, " chunk ", route.index,
                                                   " result: ", s.message()));
      }
    }
    if (t.transform != nullptr) {
      if (auto s = t.transform->Inverse(averages[i].data(), static_cast<int64_t>(t.rows),
                                        static_cast<int64_t>(t.cols), averages[i].data());
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("tensor ", t.tensor_id, ": ", s.message()));
      }
    }
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    std::copy(averages[i].begin(), averages[i].end(), plan.tensors[i].data);
  }
  report.decode_seconds = SecondsSince(start);
  return report;
}

}  // namespace gift::worker
