#include "common/rpc/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gift::rpc {
namespace {

// google.rpc.Code has 17 codes, 0 (OK) to 16 (UNAUTHENTICATED).
constexpr int kMaxCode = 16;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  if (code < 0 || code > kMaxCode) {
    return grpc::Status(grpc::StatusCode::UNKNOWN, std::string(status.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < 0 || code > kMaxCode) {
    return absl::UnknownError(status.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  const absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace gift::rpc
