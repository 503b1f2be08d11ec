// `giftctl health [TARGET]`: the grpc.health.v1 status of a GIFT-PS daemon's
// gRPC endpoint (the coordinator by default; a server's --listen, or a
// worker's socket "unix:/run/gift/worker.sock"), for exec probes where the
// endpoint requires mutual TLS (the kubelet's own gRPC probes speak plaintext
// only). Prints SERVING / NOT_SERVING.
//
// Thread safety: plain function.
#ifndef GIFT_TOOLS_GIFTCTL_HEALTH_CHECK_H_
#define GIFT_TOOLS_GIFTCTL_HEALTH_CHECK_H_

#include <grpcpp/channel.h>

#include <memory>
#include <ostream>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace gift::giftctl {

// OK when the endpoint reports SERVING; UNAVAILABLE when it is NOT_SERVING or
// cannot be reached (the probe fails either way); the call's own status
// otherwise. Writes the serving status to `out` when there is one.
absl::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout,
                         std::ostream& out);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_HEALTH_CHECK_H_
