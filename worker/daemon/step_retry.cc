#include "worker/daemon/step_retry.h"

#include "worker/engine/step_failure.h"

namespace gift::worker {

bool RetryUnderSameEpoch(const absl::Status& failure, const gift::v1::ClusterState& state) {
  if (failure.code() != absl::StatusCode::kUnavailable) return false;
  const StepFailureInfo info = DescribeStepFailure(failure);
  if (info.pushed) return false;
  if (!info.aggregator.has_value()) return true;
  for (const gift::v1::Member& server : state.servers()) {
    if (server.data_address() == *info.aggregator) return false;
  }
  return true;
}

}  // namespace gift::worker
