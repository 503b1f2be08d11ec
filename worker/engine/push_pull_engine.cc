#include "worker/engine/push_pull_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/payload.h"
#include "worker/engine/chunk_sender.h"
#include "worker/engine/node_route.h"
#include "worker/engine/server_route.h"
#include "worker/engine/tensor_buffer_cache.h"
#include "worker/engine/tensor_buffers.h"

namespace gift::worker {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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
      {.on_receive = [self](transport::Message m) { self->inbox_.OnMessage(std::move(m)); },
       .on_peer_failure =
           [self](transport::PeerId peer, const absl::Status& why) {
             self->sender_->Forget(peer);
             self->inbox_.OnPeerFailure(peer, why);
           },
       .place_payload = [self](transport::PeerId, absl::Span<const uint8_t> header,
                               size_t bytes) { return self->inbox_.PlacePayload(header, bytes); }});
  if (!transport.ok()) return transport.status();
  engine->transport_ = *std::move(transport);
  // A peer fails only once connected through the sender: it exists by then.
  engine->sender_ =
      std::make_unique<ChunkSender>(*engine->transport_, engine->inbox_, options.codec_options);
  engine->buffers_ = std::make_unique<TensorBufferCache>(*engine->transport_, engine->inbox_,
                                                         options.codec_options,
                                                         options.device_stages, kEvictAfterRuns);
  engine->server_route_ = std::make_unique<ServerRoute>(*engine->sender_);
  engine->node_route_ =
      std::make_unique<NodeLeaderRoute>(*engine->sender_, engine->inbox_, options.codec_options);
  return engine;
}

PushPullEngine::~PushPullEngine() {
  // The buffers must outlive the sends from them.
  inbox_.AwaitSends(options_.timeout);
  // Regions go before the transport, the buffers after it (a placed receive
  // may still be landing until the transport is gone).
  if (buffers_ != nullptr) buffers_->ReleaseRegions();
  transport_.reset();
}

std::string PushPullEngine::address() const { return transport_->address(); }
uint64_t PushPullEngine::error_feedback_bytes() const { return buffers_->error_feedback_bytes(); }
void PushPullEngine::AbortEpochsBefore(uint64_t epoch, absl::string_view why) {
  inbox_.AbortEpochsBefore(epoch, why);
}
void PushPullEngine::AbortStep(absl::Status why) { inbox_.AbortStep(std::move(why)); }

absl::Status PushPullEngine::FailStep(absl::Status s) {
  const bool pushed = inbox_.pushed();
  EndStep();
  return WithPushed(std::move(s), pushed);
}

void PushPullEngine::EndStep() {
  for (ChunkSlot* slot : inbox_.Close(step_chunks_)) {
    step_buffers_[slot->tensor]->GrowResult(*slot, slot->unplaced.size());
  }
  // Unplaced results are not needed any more (keeping them would pin memory).
  for (ChunkSlot* slot : step_chunks_) std::vector<uint8_t>().swap(slot->unplaced);
  open_ = false;
  open_ids_.clear();
  open_plan_.tensors.clear();
  buffers_->Collect(runs_);
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
  StepRoute* route = step.node != nullptr ? static_cast<StepRoute*>(node_route_.get())
                                          : static_cast<StepRoute*>(server_route_.get());
  if (auto s = route->Begin(step); !s.ok()) return s;
  route_ = route;
  ++runs_;
  // Error feedback residuals belong to one world: a new set of workers
  // starts them from zero (a step retried in the same world keeps them).
  const std::pair<uint32_t, uint64_t> world{step.world_size, step.worker_set};
  if (world_.has_value() && *world_ != world) buffers_->ResetResiduals();
  world_ = world;
  open_plan_ = step;
  open_report_ = StepReport{};
  // The step's bookkeeping reuses the last step's capacity.
  step_shapes_.clear();
  step_peers_.clear();
  step_buffers_.clear();
  step_chunks_.clear();
  inbox_.Open(step.epoch, step.step, runs_, step.keys, step.node != nullptr);
  open_ = true;
  return absl::OkStatus();
}

absl::Status PushPullEngine::AwaitSendBuffers(absl::Span<ChunkSlot* const> slots) {
  if (inbox_.Expect(slots, std::min(kStalledSendGrace, options_.timeout))) {
    FreeRetiredArenas();
    return absl::OkStatus();
  }
  std::vector<size_t> tensors;  // positions in the step
  for (const ChunkSlot* slot : inbox_.StalledSends(slots)) {
    if (!absl::c_linear_search(tensors, slot->tensor)) tensors.push_back(slot->tensor);
  }
  for (const size_t i : tensors) {
    GIFT_RETURN_IF_ERROR(step_buffers_[i]->RenewSendArena());
    inbox_.DetachSends(*step_buffers_[i]);
    stalled_send_arenas_renewed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!inbox_.Expect(slots, options_.timeout)) {
    return absl::UnavailableError("pushes of an earlier step have not completed");
  }
  FreeRetiredArenas();
  return absl::OkStatus();
}

void PushPullEngine::FreeRetiredArenas() {
  for (TensorBuffers* buffers : step_buffers_) {
    if (buffers->retired_arenas() == 0 || !inbox_.DetachedSendsEnded(*buffers)) continue;
    stalled_send_arenas_freed_.fetch_add(buffers->retired_arenas(), std::memory_order_relaxed);
    buffers->FreeRetiredArenas();
  }
}

void PushPullEngine::Cancel() {
  if (open_) EndStep();
}

absl::Status PushPullEngine::Add(absl::Span<const TensorStep> tensors) {
  if (!open_) return absl::FailedPreconditionError("no step is open");
  auto fail = [this](absl::Status s) { return FailStep(std::move(s)); };
  const size_t first = open_plan_.tensors.size();
  step_shapes_.resize(first + tensors.size());
  step_peers_.resize(first + tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorStep& t = tensors[k];
    if (auto s = CheckTensor(t, step_shapes_[first + k]); !s.ok()) return fail(s);
    if (!open_ids_.insert(t.tensor_id).second) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("tensor ", t.tensor_id, " appears twice")));
    }
  }
  // A step aborted already (opened under an epoch a newer state replaced)
  // sends nothing.
  if (absl::Status aborted = inbox_.aborted(); !aborted.ok()) return fail(aborted);
  // Connections first: Connect waits for the progress thread.
  for (size_t k = 0; k < tensors.size(); ++k) {
    std::vector<transport::PeerId>& peers = step_peers_[first + k];
    peers.clear();
    for (const ChunkRoute& c : tensors[k].chunks) {
      auto peer = route_->Connect(open_plan_, tensors[k], c);
      if (!peer.ok()) return fail(peer.status());
      peers.push_back(*peer);
    }
  }
  open_plan_.tensors.insert(open_plan_.tensors.end(), tensors.begin(), tensors.end());
  const StepPlan& plan = open_plan_;
  const size_t chunks_before = step_chunks_.size();
  for (size_t i = first; i < plan.tensors.size(); ++i) {
    auto buffers = buffers_->For(plan.tensors[i], step_shapes_[i], runs_);
    if (!buffers.ok()) return fail(buffers.status());
    step_buffers_.push_back(*buffers);
    (*buffers)->chunks_left = plan.tensors[i].chunks.size();
    for (ChunkSlot& slot : (*buffers)->chunks()) {
      slot.tensor = i;
      slot.tensor_id = plan.tensors[i].tensor_id;
      step_chunks_.push_back(&slot);
    }
  }
  const absl::Span<ChunkSlot* const> added =
      absl::MakeConstSpan(step_chunks_).subspan(chunks_before);
  if (auto s = AwaitSendBuffers(added); !s.ok()) return fail(s);

  StepReport& report = open_report_;
  const double decode_before = report.decode_seconds;
  const auto start = Clock::now();
  const RunningStep step = running();
  for (size_t i = first; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    auto x = step_buffers_[i]->stage().Prepare(t.data);
    if (!x.ok()) return fail(InTensor(x.status(), t.tensor_id));
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      if (auto s = route_->Send(step, i, c, *x, report); !s.ok()) return fail(s);
      // Results of earlier chunks are decoded while later ones encode.
      auto drained = DrainArrivals(/*wait=*/false, absl::InfinitePast());
      if (!drained.ok()) return fail(drained.status());
    }
  }
  if (auto s = route_->Progress(step, report); !s.ok()) return fail(s);
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
  inbox_.ExpectNoMore();
  while (!inbox_.complete()) {
    auto drained = DrainArrivals(/*wait=*/true, deadline);
    if (!drained.ok()) return fail(drained.status());
    if (!*drained) {
      const std::string dropped = inbox_.DroppedSoFar();
      return fail(absl::DeadlineExceededError(absl::StrCat(
          "step ", plan.step, " of epoch ", plan.epoch, ": ", inbox_.missing(), " of ",
          step_chunks_.size(), " chunks missing after ", absl::FormatDuration(result_timeout),
          dropped.empty() ? "" : " (", dropped, dropped.empty() ? "" : ")")));
    }
  }
  // An abort that came before the last arrival fails the step; one after it
  // does not (see ResultInbox::Take).
  if (auto aborted = inbox_.IncompleteAbort(); !aborted.ok()) return fail(aborted);
  report.wait_seconds = SecondsSince(start) - (report.decode_seconds - decode_before_wait);

  // Every chunk arrived and decoded: the step succeeded.
  const auto commit = Clock::now();
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorStep& t = plan.tensors[i];
    if (auto s = step_buffers_[i]->stage().WriteResult(t.data); !s.ok()) {
      return fail(InTensor(s, t.tensor_id));
    }
    step_buffers_[i]->stage().CommitResidual();
  }
  report.decode_seconds += SecondsSince(commit);
  const StepReport done = report;
  EndStep();
  return done;
}

absl::Status PushPullEngine::DecodeArrived(ChunkSlot& slot) {
  const TensorStep& t = open_plan_.tensors[slot.tensor];
  TensorBuffers& buffers = *step_buffers_[slot.tensor];
  const absl::Span<const uint8_t> bytes = slot.result_bytes_view();
  open_report_.CountPulled(slot.tensor, bytes.size());
  // With data-plane keys, the inbox let in only results whose MAC verified.
  auto parsed = codec::ParsePayload(bytes, {},
                                    open_plan_.keys != nullptr ? codec::ChecksumCheck::kCoveredByMac
                                                               : codec::ChecksumCheck::kVerify);
  absl::Status s = parsed.status();
  if (s.ok() && (parsed->view.rows != slot.shape.rows || parsed->view.cols != slot.shape.cols)) {
    s = absl::InvalidArgumentError(absl::StrCat("result is ", parsed->view.rows, "x",
                                                parsed->view.cols, ", chunk is ", slot.shape.rows,
                                                "x", slot.shape.cols));
  }
  if (s.ok()) s = buffers.stage().DecodeChunk(parsed->view, slot.offset);
  if (!s.ok()) {
    return InTensor(absl::Status(s.code(), absl::StrCat("result: ", s.message())), t.tensor_id,
                    slot.index);
  }
  if (--buffers.chunks_left == 0) return InTensor(buffers.stage().FinishDecode(), t.tensor_id);
  return absl::OkStatus();
}

absl::StatusOr<bool> PushPullEngine::DrainArrivals(bool wait, absl::Time deadline) {
  auto taken = inbox_.Take(wait, deadline, draining_);
  if (!taken.ok() || !*taken) return taken;
  const auto start = Clock::now();
  for (ChunkSlot* slot : draining_) {
    if (auto s = DecodeArrived(*slot); !s.ok()) return s;
  }
  open_report_.decode_seconds += SecondsSince(start);
  if (auto s = route_->Progress(running(), open_report_); !s.ok()) return s;
  return true;
}

}  // namespace gift::worker
