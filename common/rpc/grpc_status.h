// Conversions between absl::Status (inside the process, across module
// boundaries) and grpc::Status (on the wire). absl::StatusCode and
// grpc::StatusCode share their numbering (both follow google.rpc.Code), so a
// status keeps its code and message both ways.
//
// Thread safety: stateless functions.
#ifndef GIFT_COMMON_RPC_GRPC_STATUS_H_
#define GIFT_COMMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gift::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);

absl::Status FromGrpcStatus(const grpc::Status& status);

// FromGrpcStatus with `context` prepended to the message ("Join: ...") so a
// caller can tell which call failed; OK stays OK.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context);

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_GRPC_STATUS_H_
