// What a failed push-pull step says about its failure, carried as payloads of
// its absl::Status (so it survives every layer that passes the status on):
// the aggregator whose connection failed, and whether any push of the step
// had left. PushPullEngine writes them; the retry rules (step_retry.h) read
// them.
//
//   absl::Status s = AggregatorFailure("push failed", address, why);  // engine
//   s = WithPushed(std::move(s), /*pushed=*/true);                   // engine
//   StepFailureInfo info = DescribeStepFailure(s);                   // caller
//
// Thread safety: pure functions.
#ifndef GIFT_WORKER_ENGINE_STEP_FAILURE_H_
#define GIFT_WORKER_ENGINE_STEP_FAILURE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gift::worker {

// What the status of a failed Run / Add / Finish says about the failure: the
// transport address of the aggregator whose connection failed or could not
// be made, if that is why; and whether any push of the step had been handed
// to the transport (servers may then hold this rank's chunks of the step: a
// retry must wait for a new epoch). Statuses that carry no such payload
// (from elsewhere) read as pushed, no aggregator.
struct StepFailureInfo {
  std::optional<std::string> aggregator;
  bool pushed = true;
};
StepFailureInfo DescribeStepFailure(const absl::Status& failure);

// Unavailable "<what> (<address>): <why>", naming `address` as the failed
// aggregator.
absl::Status AggregatorFailure(absl::string_view what, absl::string_view address,
                               absl::string_view why);
// `failure` with whether the step had pushed.
absl::Status WithPushed(absl::Status failure, bool pushed);

// `s` (unchanged when OK) with its message prefixed "tensor <id>: ", or
// "tensor <id> chunk <chunk>: " when chunk >= 0.
absl::Status InTensor(const absl::Status& s, uint64_t tensor_id, int64_t chunk = -1);

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_STEP_FAILURE_H_
