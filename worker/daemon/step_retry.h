// When a worker retries a failed step: under the same epoch at once, or only
// once the cluster has moved to a new epoch (worker_core.cc's retry loops).
//
// A step that failed after some of its pushes left must wait for a new
// epoch: servers count a rank once per (epoch, step, chunk), and a chunk that
// completed with the first attempt's push sent its result to a step that had
// ended, so a retry under the same epoch would wait for it forever. A step
// that failed before any push left holds nothing at any server: running it
// again under the same epoch counts this rank exactly once. That is worth
// doing at once when the failure names no server of the current epoch (a
// connection to a server that the epoch already dropped); a failed server of
// the current epoch is evicted by a new epoch, which is what to wait for.
//
//   if (RetryUnderSameEpoch(report.status(), *session->state()) && n++ < kMaxSameEpochRetries)
//     continue;  // plan and run again now
//
// Thread safety: a pure function.
#ifndef GIFT_WORKER_DAEMON_STEP_RETRY_H_
#define GIFT_WORKER_DAEMON_STEP_RETRY_H_

#include "absl/status/status.h"
#include "gift/v1/cluster.pb.h"

namespace gift::worker {

// Retries under the same epoch per step before a worker waits for a new one
// (bounds a loop on a failure that keeps coming back).
inline constexpr int kMaxSameEpochRetries = 3;

// True when `failure` (a PushPullEngine step's) is Unavailable, none of the
// step's pushes left (DescribeStepFailure), and the aggregator it names, if
// any, is not a server of `state`.
bool RetryUnderSameEpoch(const absl::Status& failure, const gift::v1::ClusterState& state);

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_RETRY_H_
