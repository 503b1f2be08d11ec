#include "worker/daemon/step_sketches.h"

#include <algorithm>
#include <utility>

#include "common/base/logging.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

StepSketches::StepSketches(const control::MemberSession* session, StepExchange* exchange,
                           const DeviceMemory* memory, absl::Duration timeout)
    : exchange_(exchange),
      memory_(memory),
      timeout_(timeout),
      sketches_(SketchExchange::RegistrarOf(session)) {}

void StepSketches::Prepare(const gift::v1::ClusterState& before, uint64_t step,
                           const std::vector<LocalTensor>& gradients) {
  prepared_.clear();
  auto prepared = sketches_.Prepare(before, step, gradients, memory_);
  compute_seconds_ = sketches_.last_prepare_seconds();
  if (prepared.ok()) {
    prepared_ = *std::move(prepared);
  } else {
    CountFailure(step, prepared.status());
  }
}

StepSketches::Cost StepSketches::Exchange(uint64_t step, absl::Time step_deadline) {
  Cost cost{.compute_seconds = compute_seconds_};
  bool exchanged_all = false;
  if (!prepared_.empty()) {
    const absl::Time deadline = std::min(step_deadline, absl::Now() + timeout_);
    auto exchanged = exchange_->Run(step, prepared_, ExchangeKind::kSketches, deadline, timeout_);
    if (exchanged.ok()) {
      cost.exchange = exchanged->report;
      exchanged_all = true;
    } else {
      sketches_.Forget();  // the owner gets no statistics of this step
      CountFailure(step, exchanged.status());
    }
  }
  absl::MutexLock lock(&mu_);
  counters_.exchanges += exchanged_all ? 1 : 0;
  counters_.bytes_pushed += cost.exchange.bytes_pushed;
  counters_.bytes_pulled += cost.exchange.bytes_pulled;
  counters_.seconds += cost.compute_seconds + cost.exchange_seconds();
  return cost;
}

StepSketches::Counters StepSketches::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void StepSketches::CountFailure(uint64_t step, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    ++counters_.failures;
  }
  Log(Level::kWarning, "sketch_exchange_failed",
      {{"step", static_cast<int64_t>(step)}, {"error", why.ToString()}});
}

}  // namespace gift::worker
