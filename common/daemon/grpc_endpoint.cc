#include "common/daemon/grpc_endpoint.h"

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gift::daemon {

absl::StatusOr<std::unique_ptr<GrpcEndpoint>> GrpcEndpoint::Start(GrpcEndpointOptions options) {
  if (options.ports.empty()) return absl::InvalidArgumentError("a gRPC endpoint needs a port");
  std::unique_ptr<GrpcEndpoint> endpoint(new GrpcEndpoint());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  std::vector<int> ports(options.ports.size(), 0);
  std::vector<std::string> addresses;
  for (size_t i = 0; i < options.ports.size(); ++i) {
    const GrpcEndpointOptions::Port& p = options.ports[i];
    builder.AddListeningPort(p.address, p.credentials, &ports[i]);
    addresses.push_back(p.address);
  }
  if (options.service != nullptr) {
    builder.RegisterService(options.service);
  } else {
    endpoint->unimplemented_ = std::make_unique<grpc::CallbackGenericService>();
    builder.RegisterCallbackGenericService(endpoint->unimplemented_.get());
  }
  if (options.max_receive_message_bytes > 0) {
    builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  }
  if (options.keepalive_interval > absl::ZeroDuration()) {
    builder.AddChannelArgument(
        GRPC_ARG_KEEPALIVE_TIME_MS,
        static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_interval)));
    builder.AddChannelArgument(
        GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
        static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // Pings without data frames in between, unbounded: a Watch stream may
    // send nothing for minutes (the default stops pinging after 2).
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (options.rpc_counter != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::move(options.rpc_counter));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  endpoint->server_ = builder.BuildAndStart();
  bool bound = endpoint->server_ != nullptr;
  for (size_t i = 0; bound && i < options.ports.size(); ++i) {
    const std::string& address = options.ports[i].address;
    if (absl::StartsWith(address, "unix:")) {
      endpoint->bound_.push_back(address);
    } else {
      bound = ports[i] != 0;
      endpoint->bound_.push_back(WithPort(address, ports[i]));
    }
  }
  if (!bound) {
    endpoint->stopped_ = endpoint->server_ == nullptr;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", absl::StrJoin(addresses, " and ")));
  }
  endpoint->SetServing(false);
  return endpoint;
}

GrpcEndpoint::~GrpcEndpoint() { Shutdown(absl::Milliseconds(200)); }

void GrpcEndpoint::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

void GrpcEndpoint::Shutdown(absl::Duration grace) {
  if (stopped_) return;
  stopped_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  server_->Wait();
}

std::string WithPort(const std::string& listen, int port) {
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

}  // namespace gift::daemon
