// A daemon's gRPC server: its listening ports, its service (or none), the
// grpc.health.v1 service every daemon serves, the per-RPC counters, and the
// bounded shutdown.
//
//   GrpcEndpointOptions options;
//   options.ports = {{listen, credentials->server}};
//   options.service = &service;  // null: health only
//   options.rpc_counter = MakeRpcCounterInterceptor(*metrics->registry(), ...);
//   GIFT_ASSIGN_OR_RETURN(std::unique_ptr<GrpcEndpoint> endpoint,
//                         GrpcEndpoint::Start(std::move(options)));
//   endpoint->SetServing(true);
//   Log(kInfo, "listening", {{"address", endpoint->bound_address(0)}});
//   ... signal ...
//   endpoint->SetServing(false);
//   endpoint->Shutdown(absl::Milliseconds(500));
//
// The health status starts NOT_SERVING. Without a service a generic one
// answers UNIMPLEMENTED to every other method (gRPC serves the health
// service only next to a service with a polled queue).
//
// Ownership: the endpoint owns the grpc::Server; `service` and the registry
// behind `rpc_counter` must outlive it. Thread safety: SetServing may be
// called from any thread; Shutdown and the destructor from one thread.
#ifndef GIFT_COMMON_DAEMON_GRPC_ENDPOINT_H_
#define GIFT_COMMON_DAEMON_GRPC_ENDPOINT_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gift::daemon {

struct GrpcEndpointOptions {
  struct Port {
    std::string address;  // "HOST:PORT" (port 0 picks one) or "unix:/path"
    std::shared_ptr<grpc::ServerCredentials> credentials;
  };
  std::vector<Port> ports;  // at least one
  grpc::Service* service = nullptr;  // not owned; null: grpc.health.v1 only
  // Optional: counts the RPCs (common/daemon/rpc_metrics.h).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> rpc_counter;
  int max_receive_message_bytes = 0;  // 0: gRPC's default (4 MiB)
  // > 0: the server pings every client connection this often (HTTP/2 PING,
  // also while no call is active) and closes a connection whose ping is not
  // answered within `keepalive_timeout`, ending its calls. A stopped
  // (SIGSTOP) or cut-off process answers no ping; a busy one does (gRPC's
  // own threads answer). 0: gRPC's default (no server pings).
  absl::Duration keepalive_interval = absl::ZeroDuration();
  absl::Duration keepalive_timeout = absl::Seconds(1);
};

class GrpcEndpoint {
 public:
  // Builds and starts the server. UNAVAILABLE "cannot listen on A and B"
  // (every address of `options.ports`) when it cannot start or a TCP port
  // cannot be bound; INVALID_ARGUMENT without ports.
  static absl::StatusOr<std::unique_ptr<GrpcEndpoint>> Start(GrpcEndpointOptions options);

  // Shutdown(200 ms) unless done.
  ~GrpcEndpoint();

  GrpcEndpoint(const GrpcEndpoint&) = delete;
  GrpcEndpoint& operator=(const GrpcEndpoint&) = delete;

  // The address of port `i` with the port gRPC bound ("127.0.0.1:41733" for
  // "127.0.0.1:0"); a unix: address as given.
  const std::string& bound_address(size_t i) const { return bound_[i]; }

  // The grpc.health.v1 status of every service ("" included).
  void SetServing(bool serving);

  // Stops accepting calls; calls still running after `grace` are cancelled
  // (clients retry), then waits for the server's threads. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  GrpcEndpoint() = default;

  std::unique_ptr<grpc::CallbackGenericService> unimplemented_;  // with no service
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> bound_;
  bool stopped_ = false;
};

// `listen` ("HOST:PORT") with its port replaced by `port`.
std::string WithPort(const std::string& listen, int port);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_GRPC_ENDPOINT_H_
