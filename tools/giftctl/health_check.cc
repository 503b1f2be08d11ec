#include "tools/giftctl/health_check.h"

#include <grpcpp/client_context.h>

#include "common/rpc/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace gift::giftctl {

absl::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout,
                         std::ostream& out) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "Health.Check");
  out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << '\n';
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError("the endpoint is not serving");
  }
  return absl::OkStatus();
}

}  // namespace gift::giftctl
