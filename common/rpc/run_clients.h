// The training clients of a run, as the workers report them (Member.client,
// cluster.proto): a worker whose buffers a client of run `generation`
// registered. The coordinator starts a new run for a registration without a
// run id once every such client has disconnected; the workers' refusals and
// giftctl name or count them.
//
// Thread safety: plain function.
#ifndef GIFT_COMMON_RPC_RUN_CLIENTS_H_
#define GIFT_COMMON_RPC_RUN_CLIENTS_H_

#include <cstdint>

#include "gift/v1/cluster.pb.h"

namespace gift::rpc {

// Whether `member` is a worker that reports a training client of the run of
// generation `generation` (connected or not: TrainingClient.connected).
inline bool ReportsClientOfRun(const gift::v1::Member& member, uint64_t generation) {
  return member.role() == gift::v1::MEMBER_ROLE_WORKER && member.has_client() &&
         member.client().run_generation() == generation;
}

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_RUN_CLIENTS_H_
