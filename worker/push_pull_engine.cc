#include "worker/push_pull_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/dataplane/chunk_rng_key.h"
#include "worker/push_pull_engine_internal.h"
#include "worker/tensor_buffers.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;
using engine_internal::Annotate;
using engine_internal::Clock;
using engine_internal::OwnChunkHeader;
using engine_internal::SecondsSince;

// Checks one tensor's plan; writes its chunks' shapes in the order given.
absl::Status CheckTensor(const TensorStep& t, std::vector<dataplane::ChunkShape>& shapes) {
  const std::string name = absl::StrCat("tensor ", t.tensor_id);
  if (t.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": null buffer"));
  if (t.rows == 0 || t.cols == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty shape"));
  }
  if (auto s = codec::Validate(t.push_spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": push codec: ", s.message()));
  }
  if (t.transform != nullptr && (static_cast<uint64_t>(t.transform->d_out()) != t.rows ||
                                 static_cast<uint64_t>(t.transform->d_in()) != t.cols)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": transform shape ", t.transform->d_out(),
                                                   "x", t.transform->d_in(), " is not ", t.rows,
                                                   "x", t.cols));
  }
  const uint64_t total = t.rows * t.cols;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<uint32_t> indices;
  shapes.clear();
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
  return absl::OkStatus();
}

}  // namespace

PushPullEngine::PushPullEngine(const PushPullEngineOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<PushPullEngine>> PushPullEngine::Create(
    const transport::TransportFactory& make_transport, const PushPullEngineOptions& options) {
  if (!make_transport) return absl::InvalidArgumentError("no transport factory");
  std::unique_ptr<PushPullEngine> engine(new PushPullEngine(options));
  PushPullEngine* self = engine.get();
  auto transport = make_transport(
      {.on_receive = [self](transport::Message m) { self->OnMessage(std::move(m)); },
       .on_peer_failure = [self](transport::PeerId peer,
                                 const absl::Status& why) { self->OnPeerFailure(peer, why); },
       .place_payload = [self](transport::PeerId, absl::Span<const uint8_t> header,
                               size_t bytes) { return self->PlacePayload(header, bytes); }});
  if (!transport.ok()) return transport.status();
  engine->transport_ = *std::move(transport);
  return engine;
}

PushPullEngine::~PushPullEngine() {
  {
    // The buffers must outlive the sends from them.
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sends_in_flight_ == 0; };
    (void)mu_.AwaitWithTimeout(absl::Condition(&idle), options_.timeout);
  }
  // Regions go before the transport, the buffers after it (a placed receive
  // may still be landing until the transport is gone).
  for (auto& [key, buffers] : buffers_) buffers->ReleaseRegions();
  for (auto& buffers : retired_) buffers->ReleaseRegions();
  transport_.reset();
}

std::string PushPullEngine::address() const { return transport_->address(); }

void PushPullEngine::OnPeerFailure(transport::PeerId peer, const absl::Status& why) {
  connections_.Forget(peer);
  absl::MutexLock lock(&mu_);
  // Another worker of the node group: its death ends its epoch, not this
  // step by itself (see StepPlan::node).
  if (node_mate_peers_.erase(peer) > 0) return;
  failed_peers_.insert(peer);
  // Only a connection the step pushes to ends it: a report about another
  // one (a server of an earlier epoch, a connection attempt made for an
  // earlier step) says nothing about this step's servers.
  if (!active_ || !inflight_.aborted.ok()) return;
  auto it = inflight_.peers.find(peer);
  if (it == inflight_.peers.end()) return;
  ++peer_failures_that_aborted_;
  inflight_.aborted = AggregatorFailure("an aggregator failed", it->second, why.message());
}

uint64_t PushPullEngine::peer_failures() const {
  absl::MutexLock lock(&mu_);
  return failed_peers_.size();
}

uint64_t PushPullEngine::peer_failures_that_aborted() const {
  absl::MutexLock lock(&mu_);
  return peer_failures_that_aborted_;
}

absl::Status PushPullEngine::FailStep(absl::Status s) {
  bool pushed = true;
  {
    absl::MutexLock lock(&mu_);
    pushed = inflight_.pushed;
  }
  EndStep();
  return WithPushed(std::move(s), pushed);
}

uint64_t PushPullEngine::stray_messages() const {
  absl::MutexLock lock(&mu_);
  return stray_;
}

std::map<std::string, uint64_t> PushPullEngine::auth_failures() const {
  std::map<std::string, uint64_t> out;
  for (dataplane::AuthFailure f : dataplane::kAllAuthFailures) {
    out[std::string(dataplane::AuthFailureName(f))];
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [reason, count] : auth_failures_) out[reason] = count;
  return out;
}

void PushPullEngine::AbortEpochsBefore(uint64_t epoch, absl::string_view why) {
  absl::MutexLock lock(&mu_);
  if (active_ && inflight_.epoch < epoch && inflight_.aborted.ok()) {
    inflight_.aborted = absl::AbortedError(
        absl::StrCat("step ", inflight_.step, " of epoch ", inflight_.epoch, ": ", why));
  }
}

void PushPullEngine::AbortStep(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (active_ && inflight_.aborted.ok() && !why.ok()) inflight_.aborted = std::move(why);
}

absl::StatusOr<transport::PeerId> PushPullEngine::PeerFor(const std::string& address) {
  auto peer = connections_.Get(*transport_, address);
  if (!peer.ok()) {
    return AggregatorFailure("cannot reach an aggregator", address, peer.status().message());
  }
  absl::MutexLock lock(&mu_);
  inflight_.peers.try_emplace(*peer, address);
  // Reported failed between the cache lookup and now: the step cannot use it.
  if (failed_peers_.contains(*peer)) {
    return AggregatorFailure("an aggregator failed", address, "its connection was reported failed");
  }
  return *peer;
}

absl::StatusOr<TensorBuffers*> PushPullEngine::BuffersFor(
    const StepPlan& plan, size_t i, absl::Span<const dataplane::ChunkShape> shapes) {
  const TensorStep& t = plan.tensors[i];
  const codec::CodecSpec& spec = t.push_spec;
  const BuffersKey key{t.tensor_id, spec.format, spec.scaling, spec.block_size, spec.rounding};
  std::unique_ptr<TensorBuffers>& entry = buffers_[key];
  std::unique_ptr<TensorBuffers> previous;  // replaced: its residual may carry over
  if (entry != nullptr && !entry->Fits(t)) previous = std::move(entry);
  if (entry == nullptr) {
    auto created = TensorBuffers::Create(
        t, shapes, spec,
        {.error_feedback = t.error_feedback, .codec_options = options_.codec_options},
        transport_.get(), previous.get(), options_.device_stages);
    if (previous != nullptr) {
      bool busy = false;
      {
        absl::MutexLock lock(&mu_);
        for (const ChunkSlot& c : previous->chunks()) busy = busy || c.Busy();
      }
      if (busy) retired_.push_back(std::move(previous));
    }
    if (!created.ok()) {
      buffers_.erase(key);
      return Annotate(created.status(), t.tensor_id);
    }
    entry = *std::move(created);
  }
  if (auto s = entry->UseTransform(t); !s.ok()) return Annotate(s, t.tensor_id);
  entry->last_run = runs_;
  return entry.get();
}

void PushPullEngine::EndStep() {
  std::vector<ChunkSlot*> grow;
  {
    absl::MutexLock lock(&mu_);
    active_ = false;
    for (ChunkSlot* slot : step_chunks_) {
      // A result too big for its slot was handed over by the transport: size
      // the slot for the next step.
      if (!slot->unplaced.empty() && !slot->Busy() && slot->unplaced.size() > slot->result.size()) {
        grow.push_back(slot);
      }
    }
  }
  for (ChunkSlot* slot : grow) {
    step_buffers_[slot->tensor]->GrowResult(*slot, slot->unplaced.size());
  }
  // Unplaced results are not needed any more (keeping them would pin memory).
  for (ChunkSlot* slot : step_chunks_) std::vector<uint8_t>().swap(slot->unplaced);
  open_ = false;
  open_ids_.clear();
  open_plan_.tensors.clear();
  // Frees what is no longer used and no longer busy, outside the lock
  // (unregistering waits for the progress thread).
  std::vector<std::unique_ptr<TensorBuffers>> unused;
  {
    absl::MutexLock lock(&mu_);
    auto idle = [](const TensorBuffers& b) {
      for (const ChunkSlot& c : b.chunks()) {
        if (c.Busy()) return false;
      }
      return true;
    };
    for (auto& b : retired_) {
      if (idle(*b)) unused.push_back(std::move(b));
    }
    std::erase(retired_, nullptr);
    for (auto& [key, b] : buffers_) {
      if (b != nullptr && runs_ - b->last_run > kEvictAfterRuns && idle(*b)) {
        unused.push_back(std::move(b));
      }
    }
    absl::erase_if(buffers_, [](const auto& entry) { return entry.second == nullptr; });
  }
  uint64_t feedback_bytes = 0;
  for (const auto& [key, b] : buffers_) feedback_bytes += b->error_feedback_bytes();
  error_feedback_bytes_.store(feedback_bytes, std::memory_order_relaxed);
}

uint64_t PushPullEngine::error_feedback_bytes() const {
  return error_feedback_bytes_.load(std::memory_order_relaxed);
}

StepPlan StepHeader(const StepPlan& plan) {
  StepPlan header;
  header.epoch = plan.epoch;
  header.step = plan.step;
  header.rank = plan.rank;
  header.world_size = plan.world_size;
  header.worker_set = plan.worker_set;
  header.result_timeout = plan.result_timeout;
  header.keys = plan.keys;
  header.node = plan.node;
  return header;
}

absl::StatusOr<StepReport> PushPullEngine::Run(const StepPlan& plan) {
  const StepPlan header = StepHeader(plan);
  if (auto s = Begin(header); !s.ok()) return s;
  // One push order for every worker, whatever the order of its plan: by
  // tensor id, then the tensor's chunks as planned (the shard map's order,
  // by index), so that each server completes its chunks one after the other
  // and streams their results while the next ones arrive.
  std::vector<TensorStep> sorted = plan.tensors;
  std::stable_sort(sorted.begin(), sorted.end(), [](const TensorStep& a, const TensorStep& b) {
    return a.tensor_id < b.tensor_id;
  });
  if (auto s = Add(sorted); !s.ok()) return s;
  return Finish();
}

bool PushPullEngine::open() const { return open_; }

absl::Status PushPullEngine::Begin(const StepPlan& step) {
  if (open_) return absl::FailedPreconditionError("a step is already open");
  if (!step.tensors.empty()) return absl::InvalidArgumentError("Begin takes no tensors");
  if (step.world_size == 0 || step.rank >= step.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", step.rank, " of world size ", step.world_size));
  }
  if (auto s = BeginNodeStep(step); !s.ok()) return s;
  ++runs_;
  // Error feedback residuals belong to one world: a new set of workers
  // starts them from zero (a step retried in the same world keeps them).
  const std::pair<uint32_t, uint64_t> world{step.world_size, step.worker_set};
  if (world_.has_value() && *world_ != world) {
    for (auto& [key, buffers] : buffers_) buffers->stage().ResetResidual();
  }
  world_ = world;
  open_plan_ = step;
  open_report_ = StepReport{};
  // The step's bookkeeping reuses the last step's capacity.
  step_shapes_.clear();
  step_peers_.clear();
  step_buffers_.clear();
  step_chunks_.clear();
  {
    absl::MutexLock lock(&mu_);
    inflight_.epoch = step.epoch;
    inflight_.step = step.step;
    inflight_.run = runs_;
    inflight_.peers.clear();
    inflight_.pushed = false;
    inflight_.slots.clear();
    inflight_.ready.clear();
    inflight_.remaining = 0;
    inflight_.aborted = absl::OkStatus();
    inflight_.keys = step.keys;
    active_ = true;
  }
  open_ = true;
  return absl::OkStatus();
}

void PushPullEngine::Cancel() {
  if (!open_) return;
  EndStep();
}

absl::Status PushPullEngine::Add(absl::Span<const TensorStep> tensors) {
  if (!open_) return absl::FailedPreconditionError("no step is open");
  auto fail = [this](absl::Status s) { return FailStep(std::move(s)); };
  const StepPlan& plan = open_plan_;
  const size_t first = plan.tensors.size();
  auto& slots = step_slots_;  // the new chunks' slots
  slots.clear();
  std::vector<std::vector<dataplane::ChunkShape>>& shapes = step_shapes_;
  shapes.resize(first + tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorStep& t = tensors[k];
    if (auto s = CheckTensor(t, shapes[first + k]); !s.ok()) return fail(s);
    if (!open_ids_.insert(t.tensor_id).second) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("tensor ", t.tensor_id, " appears twice")));
    }
  }
  // Connections first: Connect waits for the progress thread.
  std::vector<std::vector<transport::PeerId>>& peers = step_peers_;
  peers.resize(first + tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    peers[first + k].clear();
    for (const ChunkRoute& c : tensors[k].chunks) {
      // Node-local aggregation: a chunk led by another member goes to it.
      const NodeGroup* group = plan.node.get();
      const bool to_leader =
          group != nullptr && group->LeaderOf(tensors[k].tensor_id, c.index) != plan.rank;
      auto peer = PeerFor(
          to_leader ? group->AddressOf(group->LeaderOf(tensors[k].tensor_id, c.index)) : c.server);
      if (!peer.ok()) return fail(peer.status());
      if (to_leader) {
        absl::MutexLock lock(&mu_);
        node_mate_peers_.insert(*peer);
      }
      peers[first + k].push_back(*peer);
    }
  }
  open_plan_.tensors.insert(open_plan_.tensors.end(), tensors.begin(), tensors.end());
  const size_t chunks_before = step_chunks_.size();
  for (size_t i = first; i < plan.tensors.size(); ++i) {
    auto buffers = BuffersFor(plan, i, shapes[i]);
    if (!buffers.ok()) return fail(buffers.status());
    step_buffers_.push_back(*buffers);
    (*buffers)->chunks_left = plan.tensors[i].chunks.size();
    for (ChunkSlot& slot : (*buffers)->chunks()) {
      slot.tensor = i;
      slots[{plan.tensors[i].tensor_id, slot.index}] = &slot;
      step_chunks_.push_back(&slot);
    }
  }
  bool sent_before = true;
  {
    absl::MutexLock lock(&mu_);
    // A send buffer is rewritten only once its previous send completed.
    auto sent = [this, chunks_before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t c = chunks_before; c < step_chunks_.size(); ++c) {
        if (step_chunks_[c]->send_in_flight) return false;
      }
      return true;
    };
    sent_before = mu_.AwaitWithTimeout(absl::Condition(&sent), options_.timeout);
  }
  if (!sent_before) {
    return fail(absl::UnavailableError("pushes of an earlier step have not completed"));
  }
  {
    absl::MutexLock lock(&mu_);
    for (size_t c = chunks_before; c < step_chunks_.size(); ++c) {
      ChunkSlot* slot = step_chunks_[c];
      slot->placed = false;
      slot->arrived = false;
      slot->result_bytes = 0;
    }
    // Results of these chunks can only come once this worker pushed them, so
    // filing the slots now, before the pushes, loses nothing.
    for (const auto& [key, slot] : slots) inflight_.slots[key] = slot;
    inflight_.remaining += step_chunks_.size() - chunks_before;
  }

  StepReport& report = open_report_;
  const double decode_before = report.decode_seconds;
  const auto start = Clock::now();
  for (size_t i = first; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    TensorBuffers& buffers = *step_buffers_[i];
    auto x = buffers.stage().Prepare(t.data);
    if (!x.ok()) return fail(Annotate(x.status(), t.tensor_id));
    if (plan.node != nullptr && *x == nullptr) {
      return fail(Annotate(
          absl::UnimplementedError("node-local aggregation of a device tensor is not built"),
          t.tensor_id));
    }
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      ChunkSlot& slot = buffers.chunks()[c];
      if (plan.node != nullptr) {  // node-local aggregation
        if (auto s = RouteNodeChunk(plan, i, c, *x, peers[i][c], report); !s.ok()) return fail(s);
        continue;
      }
      const uint64_t dims[] = {slot.shape.rows, slot.shape.cols};
      auto view = codec::StartPayload(t.push_spec, dims, slot.send);
      absl::Status s = view.status();
      if (s.ok()) {
        s = buffers.stage().EncodeChunk(
            slot.offset, *view,
            dataplane::ChunkRngKey(t.tensor_id, slot.index, plan.step, plan.rank));
      }
      if (!s.ok()) return fail(Annotate(s, t.tensor_id, slot.index));
      codec::FinishPayload(slot.send);
      report.bytes_pushed += slot.send.size();
      const ChunkHeader header = OwnChunkHeader(ChunkKind::kPush, plan, t, slot.index);
      const auto plain = dataplane::SerializeChunkHeader(header);
      absl::StatusOr<std::array<uint8_t, dataplane::kSealedChunkHeaderBytes>> sealed;
      if (plan.keys != nullptr) {
        sealed = dataplane::SealChunk(header, plan.rank, slot.send, plan.keys->own);
        if (!sealed.ok()) return fail(sealed.status());
      }
      const absl::Span<const uint8_t> header_bytes = plan.keys != nullptr
                                                         ? absl::Span<const uint8_t>(*sealed)
                                                         : absl::Span<const uint8_t>(plain);
      {
        absl::MutexLock lock(&mu_);
        slot.send_in_flight = true;
        ++sends_in_flight_;
        inflight_.pushed = true;
      }
      const uint64_t run = runs_;
      const transport::PeerId peer = peers[i][c];
      ChunkSlot* sending = &slot;
      s = transport_->Send(
          peer, header_bytes, slot.send, [this, sending, run, peer](const absl::Status& done) {
            absl::MutexLock lock(&mu_);
            sending->send_in_flight = false;
            --sends_in_flight_;
            if (done.ok() || !active_ || inflight_.run != run || !inflight_.aborted.ok()) {
              return;
            }
            auto it = inflight_.peers.find(peer);
            inflight_.aborted = AggregatorFailure(
                "push failed", it != inflight_.peers.end() ? it->second : "", done.message());
          });
      if (!s.ok()) {
        {
          absl::MutexLock lock(&mu_);
          slot.send_in_flight = false;
          --sends_in_flight_;
        }
        return fail(AggregatorFailure("push failed", t.chunks[c].server, s.message()));
      }
      // Results of earlier chunks are decoded while later ones encode.
      auto drained = DrainArrivals(plan, /*wait=*/false, absl::InfinitePast(), report);
      if (!drained.ok()) return fail(drained.status());
    }
  }
  if (plan.node != nullptr) {
    if (auto s = PushNodeSums(plan, report); !s.ok()) return fail(s);
  }
  report.encode_seconds += SecondsSince(start) - (report.decode_seconds - decode_before);
  return absl::OkStatus();
}

absl::StatusOr<StepReport> PushPullEngine::Finish() {
  if (!open_) return absl::FailedPreconditionError("no step is open");
  auto fail = [this](absl::Status s) { return FailStep(std::move(s)); };
  const StepPlan& plan = open_plan_;
  StepReport& report = open_report_;
  const absl::Duration result_timeout = plan.result_timeout.value_or(options_.timeout);
  const absl::Time deadline = absl::Now() + result_timeout;  // for the results
  const auto start = Clock::now();
  const double decode_before_wait = report.decode_seconds;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (inflight_.remaining == 0 && inflight_.ready.empty()) break;
    }
    auto drained = DrainArrivals(plan, /*wait=*/true, deadline, report);
    if (!drained.ok()) return fail(drained.status());
    if (!*drained) {
      size_t missing = 0;
      {
        absl::MutexLock lock(&mu_);
        missing = inflight_.remaining;
      }
      return fail(absl::DeadlineExceededError(absl::StrCat(
          "step ", plan.step, " of epoch ", plan.epoch, ": ", missing, " of ", step_chunks_.size(),
          " chunks missing after ", absl::FormatDuration(result_timeout))));
    }
  }
  absl::Status aborted;
  {
    // An abort that came before the last arrival fails the step; one after
    // it does not (see DrainArrivals).
    absl::MutexLock lock(&mu_);
    if (inflight_.remaining > 0) aborted = inflight_.aborted;
  }
  if (!aborted.ok()) return fail(aborted);
  report.wait_seconds = SecondsSince(start) - (report.decode_seconds - decode_before_wait);

  // Every chunk arrived and decoded: the step succeeded.
  const auto commit = Clock::now();
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    if (auto s = step_buffers_[i]->stage().WriteResult(t.data); !s.ok()) {
      return fail(Annotate(s, t.tensor_id));
    }
    step_buffers_[i]->stage().CommitResidual();
  }
  report.decode_seconds += SecondsSince(commit);
  const StepReport done = report;
  EndStep();
  return done;
}

}  // namespace gift::worker
