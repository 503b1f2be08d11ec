#include "worker/daemon/worker_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/codec/codec_spec.h"
#include "worker/daemon/step_retry.h"
#include "worker/daemon/step_wait_reporter.h"

namespace gift::worker {
namespace {

using logging::Level;
using logging::Log;

}  // namespace

WorkerCore::WorkerCore(std::unique_ptr<PushPullEngine> engine, control::MemberSession* session,
                       WorkerCoreOptions options)
    : options_(std::move(options)),
      session_(session),
      engine_(std::move(engine)),
      waits_(session, options_.step_wait),
      store_(session),
      admission_(session, options_.min_workers),
      exchange_(engine_.get(), session, &store_, &membership_,
                StepExchange::WorkerView{.run = [this] { return admission_.run(); },
                                         .last_step = [this] { return admission_.last_step(); }}),
      client_watch_([session](const gift::v1::TrainingClient& client) {
        session->SetTrainingClient(client);
      }),
      sketches_(session, &exchange_, options_.device.memory, options_.sketch_timeout),
      owner_(session, &store_,
             {.codec_options = options_.codec_options,
              .max_jobs = options_.max_owner_jobs,
              .memory = options_.device.memory}) {
  follower_.emplace(
      session_, absl::Milliseconds(200),
      control::StateFollower::Callbacks{
          .on_wake = [this] { CheckStepPeers(); },
          .on_revision = [this](const gift::v1::ClusterState& state) { FollowRevision(state); }});
}

WorkerCore::~WorkerCore() {
  follower_->Stop();
  owner_.Stop();
  engine_.reset();
}

absl::StatusOr<std::vector<const RegisteredTensor*>> WorkerCore::Select(
    const google::protobuf::RepeatedField<uint64_t>& ids) const {
  if (registered_.empty()) {
    return absl::FailedPreconditionError("no buffers registered: call RegisterBuffers first");
  }
  std::vector<const RegisteredTensor*> selected;
  if (ids.empty()) {
    for (const RegisteredTensor& r : registered_) selected.push_back(&r);
    return selected;
  }
  absl::flat_hash_map<uint64_t, const RegisteredTensor*> by_id;
  for (const RegisteredTensor& r : registered_) by_id[r.local.tensor_id] = &r;
  for (uint64_t id : ids) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor id ", id, " is not registered"));
    }
    selected.push_back(it->second);
  }
  return selected;
}

absl::StatusOr<gift::v1::PushPullResponse> WorkerCore::PushPull(
    const gift::v1::PushPullRequest& run_request) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  // The run's step, in the cluster's numbering from here on (run_steps.h).
  const RunSteps run = admission_.run();
  absl::StatusOr<uint64_t> step = admission_.Admit(run_request.step());
  if (!step.ok()) return step.status();
  gift::v1::PushPullRequest request = run_request;
  request.set_step(*step);
  const StepAdmission::InFlight in_flight = admission_.BeginStep();

  absl::MutexLock step_lock(&step_mu_);
  // A worker in its start barrier has not begun the step: it reports the
  // step only once past it, so the others' reports name it as the rank that
  // has not begun instead of saying that every rank has.
  absl::StatusOr<gift::v1::PushPullResponse> result =
      [&]() -> absl::StatusOr<gift::v1::PushPullResponse> {
    // A step opened by StartTensors has passed its barrier.
    if (!open_.has_value() || open_->step != request.step()) {
      if (absl::Status s = admission_.AwaitStartBarrier(request.step(), deadline); !s.ok()) {
        return s;
      }
    }
    waits_.Begin(request.step());
    return RunStep(request, start, deadline);
  }();
  if (absl::IsDeadlineExceeded(result.status())) {
    // Name who the step waited for (the coordinator's view, asked now).
    const std::string who = waits_.Describe(request.step());
    if (!who.empty()) {
      result = absl::DeadlineExceededError(absl::StrCat(result.status().message(), "; ", who));
    }
  }
  waits_.End();
  if (!result.ok()) {
    // The data path speaks of cluster steps: say which step of the run.
    if (!run.Describe().empty()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("step ", run_request.step(), " of ", run.Describe(), ": ",
                                       result.status().message()));
    }
    return result;
  }
  result->set_step(run_request.step());
  return result;
}

absl::StatusOr<gift::v1::PushPullResponse> WorkerCore::RunStep(
    const gift::v1::PushPullRequest& request, std::chrono::steady_clock::time_point start,
    absl::Time deadline) {
  if (open_.has_value()) {
    if (open_->step == request.step()) return FinishOpenStep(request);
    AbandonOpenStep(absl::StrCat("a PushPull of step ", request.step(), " came"));
  }
  auto selected = Select(request.tensor_ids());
  if (!selected.ok()) return selected.status();
  std::vector<LocalTensor> tensors;
  for (const RegisteredTensor* r : *selected) {
    // 16-bit buffers: into the FP32 staging, once per step
    if (absl::Status s = r->Widen(); !s.ok()) return s;
    tensors.push_back(r->local);
  }

  // What the owner wants of this step (decided on the state before it).
  const std::shared_ptr<const gift::v1::ClusterState> before = session_->state();
  std::vector<OwnedTensorStep> owned;
  owner_.AddWanted(*before, request.step(), tensors, &owned);

  // This worker's sketches, from its gradient before the exchange.
  sketches_.Prepare(*before, request.step(), tensors);

  // A measured step first averages copies of the gradients exactly (FP32,
  // direct), then runs the step itself on the buffers.
  std::optional<StepMeasurement> measurement;
  if (request.measure_error()) {
    auto exact = StepMeasurement::Exact(request.step(), tensors, options_.device.memory,
                                        &exchange_, deadline);
    if (!exact.ok()) return exact.status();
    measurement = *std::move(exact);
  }
  const uint64_t retries_before = exchange_.retries();
  auto exchanged = exchange_.Run(request.step(), tensors, ExchangeKind::kGradients, deadline);
  if (!exchanged.ok()) return exchanged.status();
  Completed c;
  c.step = request.step();
  c.start = start;
  c.retries_before = retries_before;
  c.selected = std::move(*selected);
  c.tensors = std::move(tensors);
  c.owned = std::move(owned);
  c.exchanged = *std::move(exchanged);
  c.measurement = std::move(measurement);
  c.sketches = sketches_.Exchange(request.step(), deadline);
  return CompleteStep(std::move(c));
}

absl::StatusOr<gift::v1::PushPullResponse> WorkerCore::CompleteStep(Completed c) {
  const std::vector<LocalTensor>& tensors = c.tensors;
  const StepReport& sketch_report = c.sketches.exchange;
  const StepReport measure_report = c.measurement.has_value() ? c.measurement->report() : StepReport{};
  for (const RegisteredTensor* r : c.selected) {
    if (absl::Status s = r->Narrow(); !s.ok()) return s;  // the average, in the buffer's dtype
  }
  const uint32_t attempts = 1 + static_cast<uint32_t>(exchange_.retries() - c.retries_before);

  gift::v1::PushPullResponse response;
  response.set_step(c.step);
  response.set_epoch(c.exchanged.epoch);
  response.set_world_size(c.exchanged.world_size);
  for (size_t i = 0; i < tensors.size(); ++i) {
    gift::v1::TensorResult* r = response.add_tensors();
    r->set_tensor_id(tensors[i].tensor_id);
    r->set_basis_version(c.exchanged.versions[i].first);
    r->set_transformed(c.exchanged.versions[i].second);
  }
  // Measured steps: each average against the exact one (device averages are
  // copied to the host once, and reused for the owner below).
  if (c.measurement.has_value()) {
    if (absl::Status s = c.measurement->Compare(tensors, options_.device.memory, &response);
        !s.ok()) {
      return s;
    }
  }
  // Each tensor's payload bytes, as the engine counted them (the exchange's
  // tensors are in the step's order).
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StepReport::TensorBytes bytes = c.exchanged.report.bytes_of(i);
    response.mutable_tensors(static_cast<int>(i))->set_bytes_sent(bytes.pushed);
    response.mutable_tensors(static_cast<int>(i))->set_bytes_received(bytes.pulled);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - c.start).count();
  response.set_seconds(seconds);
  response.set_statistics_bytes_sent(sketch_report.bytes_pushed);
  response.set_statistics_bytes_received(sketch_report.bytes_pulled);

  if (options_.on_step) {
    StepStats stats{.seconds = seconds,
                    .encode_seconds = c.exchanged.report.encode_seconds,
                    .wait_seconds = c.exchanged.report.wait_seconds,
                    .decode_seconds = c.exchanged.report.decode_seconds,
                    .bytes_pushed = c.exchanged.report.bytes_pushed + measure_report.bytes_pushed,
                    .bytes_pulled = c.exchanged.report.bytes_pulled + measure_report.bytes_pulled,
                    .attempts = attempts,
                    .sketch_bytes_pushed = sketch_report.bytes_pushed,
                    .sketch_bytes_pulled = sketch_report.bytes_pulled,
                    .sketch_compute_seconds = c.sketches.compute_seconds,
                    .sketch_exchange_seconds = c.sketches.exchange_seconds()};
    if (c.measurement.has_value()) {
      const StepMeasurement::Summary errors = StepMeasurement::Summarize(response);
      stats.error_transformed = errors.transformed;
      stats.error_direct = errors.direct;
    }
    options_.on_step(stats);
  }
  membership_.Completed(c.exchanged.epoch, session_->member_id(), &response);
  session_->SetLastStep(c.step);
  admission_.Completed(c.step);
  {
    absl::MutexLock lock(&mu_);
    ++counters_.steps_completed;
    counters_.bytes_pushed += c.exchanged.report.bytes_pushed + measure_report.bytes_pushed;
    counters_.bytes_pulled += c.exchanged.report.bytes_pulled + measure_report.bytes_pulled;
    counters_.last_step_seconds = seconds;
  }
  // Hand the owned tensors' averages to the owner thread.
  const StepMeasurement* measurement = c.measurement.has_value() ? &*c.measurement : nullptr;
  owner_.HandOver(
      std::move(c.owned), tensors, seconds,
      [measurement](size_t i) {
        return measurement != nullptr ? measurement->device_average(i) : nullptr;
      },
      [this](uint64_t tensor) { return sketches_.Average(tensor); });
  return response;
}

gift::v1::WorkerInfo WorkerCore::Info() const {
  gift::v1::WorkerInfo info;
  const control::MemberIdentity id = session_->identity();
  std::shared_ptr<const gift::v1::ClusterState> state = session_->state();
  info.set_member_id(id.member_id);
  info.set_rank(id.rank);
  info.set_world_size(static_cast<uint32_t>(state->workers_size()));
  info.set_epoch(id.epoch);
  // The run's numbering.
  info.set_last_step(admission_.run().ToRun(admission_.last_step().value_or(0)));
  *info.mutable_bases() = state->bases();
  if (buffer_socket_ != nullptr) info.set_buffer_socket(buffer_socket_->path());
  if (options_.device.memory != nullptr) {
    info.set_cuda_device_count(options_.device.memory->device_count());
  }
  return info;
}

WorkerCore::Counters WorkerCore::counters() const {
  Counters c;
  {
    absl::MutexLock lock(&mu_);
    c = counters_;
  }
  c.step_retries = exchange_.retries();
  const StepSketches::Counters sketches = sketches_.counters();
  c.sketch_exchanges = sketches.exchanges;
  c.sketch_failures = sketches.failures;
  c.sketch_bytes_pushed = sketches.bytes_pushed;
  c.sketch_bytes_pulled = sketches.bytes_pulled;
  c.sketch_seconds = sketches.seconds;
  c.owner_jobs_dropped = owner_.jobs_dropped();
  c.basis_publications = owner_.publications();
  c.error_feedback_bytes = engine_->error_feedback_bytes();
  return c;
}

std::vector<gift::v1::TensorErrorRatio> WorkerCore::error_ratios() const {
  return owner_.error_ratios();
}

bool WorkerCore::Drain(absl::Duration timeout) { return admission_.Drain(timeout); }

}  // namespace gift::worker
