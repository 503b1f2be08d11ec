#include "worker/daemon/owner_duties.h"

#include <string>
#include <utility>

#include "common/base/logging.h"
#include "worker/intake/registered_tensor.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

namespace {

void LogOwnerError(uint64_t tensor, const absl::Status& error) {
  Log(Level::kWarning, "owner_error",
      {{"tensor", static_cast<int64_t>(tensor)}, {"error", error.ToString()}});
}

}  // namespace

OwnerDuties::OwnerDuties(control::MemberSession* session, BasisStore* store,
                         OwnerDutiesOptions options)
    : session_(session), options_(std::move(options)) {
  owner_ = std::make_unique<BasisOwner>(
      session_, store,
      BasisOwnerOptions{.codec_options = options_.codec_options,
                        .on_publish =
                            [this](uint64_t tensor, uint64_t version, const std::string& chosen,
                                   transform::RefreshReason reason, std::optional<double> ratio) {
                              publications_.fetch_add(1);
                              Log(Level::kInfo, "basis_published",
                                  {{"tensor", static_cast<int64_t>(tensor)},
                                   {"version", static_cast<int64_t>(version)},
                                   {"chosen", chosen},
                                   {"reason", transform::RefreshReasonName(reason)},
                                   {"ratio", ratio.value_or(-1.0)}});
                            },
                        .on_error = LogOwnerError,
                        .cancelled = [this] { return stopping_.load(); }});
  queue_.emplace(options_.max_jobs, [this](OwnerJob& job) { Run(job); });
}

OwnerDuties::~OwnerDuties() { Stop(); }

void OwnerDuties::Stop() {
  stopping_.store(true);
  queue_->Stop();
}

void OwnerDuties::AddWanted(const gift::v1::ClusterState& before, uint64_t step,
                            const std::vector<LocalTensor>& tensors,
                            std::vector<OwnedTensorStep>* owned) {
  for (const LocalTensor& t : tensors) {
    for (const gift::v1::TensorInfo& info : before.tensors()) {
      if (info.tensor_id() != t.tensor_id) continue;
      bool needs_own = false;
      if (!owner_->WantsStep(before, info, step, &needs_own)) break;
      OwnedTensorStep o{
          .step = step, .tensor_id = t.tensor_id, .name = t.name, .rows = t.rows, .cols = t.cols};
      if (needs_own) {
        if (absl::Status s = ReadTensor(t, options_.memory, &o.own); !s.ok()) {
          LogOwnerError(t.tensor_id, s);
          break;
        }
      }
      owned->push_back(std::move(o));
    }
  }
}

void OwnerDuties::HandOver(std::vector<OwnedTensorStep> owned,
                           const std::vector<LocalTensor>& tensors, double step_seconds,
                           const std::function<const std::vector<float>*(size_t)>& copied,
                           const std::function<absl::Span<const float>(uint64_t)>& sketch) {
  if (owned.empty()) return;
  std::shared_ptr<const gift::v1::ClusterState> after = session_->state();
  for (OwnedTensorStep& o : owned) {
    o.step_seconds = step_seconds;
    absl::Status read;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].tensor_id != o.tensor_id) continue;
      if (const std::vector<float>* average = copied(i); average != nullptr) {
        o.average = *average;
      } else {
        read = ReadTensor(tensors[i], options_.memory, &o.average);
      }
    }
    if (!read.ok()) {  // statistics are best effort: the step stands
      LogOwnerError(o.tensor_id, read);
      continue;
    }
    const absl::Span<const float> s = sketch(o.tensor_id);
    o.sketch.assign(s.begin(), s.end());
    // Dropped when full: the queue counts it (jobs_dropped).
    (void)queue_->Enqueue({.state = after, .step = std::move(o)});
  }
}

void OwnerDuties::AddActivationFactor(uint64_t tensor_id, std::vector<float> gram,
                                      uint64_t num_samples) {
  (void)queue_->Enqueue({.state = session_->state(),
                         .tensor_id = tensor_id,
                         .gram = std::move(gram),
                         .num_samples = num_samples});
}

std::vector<gift::v1::TensorErrorRatio> OwnerDuties::error_ratios() const {
  absl::MutexLock lock(&mu_);
  return error_ratios_;
}

void OwnerDuties::Run(OwnerJob& job) {
  absl::Status s;
  uint64_t tensor = job.tensor_id;
  if (job.step.has_value()) {
    tensor = job.step->tensor_id;
    // The latest state: a proposal published meanwhile must be seen.
    s = owner_->Observe(*session_->state(), *job.step);
  } else {
    s = owner_->AddActivationFactor(*job.state, job.tensor_id, job.gram, job.num_samples);
  }
  if (!s.ok()) LogOwnerError(tensor, s);
  // The latest error ratios, for metrics and the coordinator (heartbeats).
  std::vector<gift::v1::TensorErrorRatio> ratios = owner_->error_ratios();
  session_->SetErrorRatios(ratios);
  absl::MutexLock lock(&mu_);
  error_ratios_ = std::move(ratios);
}

}  // namespace gift::worker
