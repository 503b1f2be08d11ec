// A gRPC server interceptor that counts finished RPCs by method and status
// code, e.g. gift_coordinator_rpc_total{method="Heartbeat",code="OK"}.
//
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(MakeRpcCounterInterceptor(*metrics->registry(), "gift_coordinator_rpc_total",
//                                         {"gift.v1.Coordinator", "grpc.health.v1.Health"}));
//   builder.experimental().SetInterceptorCreators(std::move(f));
//
// Labels stay bounded: `method` is the short name of a method of one of
// `services` (looked up in the generated descriptor pool), "other" for any
// other path a client sends; `code` is the gRPC code name ("OK",
// "UNAVAILABLE", ...).
//
// Ownership: the factory keeps a reference to a family of `registry`, which
// must outlive the grpc::Server. Thread safety: used by gRPC from any thread.
#ifndef GIFT_COMMON_DAEMON_RPC_METRICS_H_
#define GIFT_COMMON_DAEMON_RPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/registry.h"

namespace gift::daemon {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcCounterInterceptor(
    prometheus::Registry& registry, absl::string_view metric_name,
    const std::vector<std::string>& services);

// "OK", "CANCELLED", ... "UNAUTHENTICATED"; "UNKNOWN" for out-of-range values.
absl::string_view GrpcCodeName(int code);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_RPC_METRICS_H_
