// What one aggregator shard needs from the coordinator's cluster state: the
// epoch, the workers' data-plane addresses by rank, the chunks the shard
// map assigns to this shard with their encoded shapes, and the policy's pull
// codec, globally and per tensor (policy::ResolveTensorSettings), read
// through dataplane::StateViewOf, the view the workers plan their steps
// from.
//
// Thread safety: a pure function.
#ifndef GIFT_SERVER_AGGREGATOR_SHARD_EPOCH_FROM_STATE_H_
#define GIFT_SERVER_AGGREGATOR_SHARD_EPOCH_FROM_STATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "gift/v1/cluster.pb.h"
#include "server/aggregator/aggregator_shard.h"

namespace gift::server {

// FailedPrecondition while the state is not usable yet (no workers, a shard
// map of an older epoch); InvalidArgument when it is inconsistent (worker
// ranks not 0..P-1, a worker without a data address, a chunk of an unknown
// tensor or one that crosses a row, a policy codec that is not valid).
absl::StatusOr<ShardEpoch> ShardEpochFromState(const gift::v1::ClusterState& state,
                                               uint32_t shard_id);

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_SHARD_EPOCH_FROM_STATE_H_
