// GrpcEndpoint: a real gRPC server on loopback (TCP and a unix socket):
// bound ports, the health status it starts with and switches, the
// UNIMPLEMENTED answer of a health-only endpoint to another service, the RPC counters, bind
// failures as statuses, and the shutdown.
#include "common/daemon/grpc_endpoint.h"

#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/temp_dir.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/rpc_metrics.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// Health.Check on `address`: the serving status, or the call's error code.
struct Check {
  grpc::StatusCode code;
  HealthCheckResponse::ServingStatus serving;
};

Check CheckHealth(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, HealthCheckRequest(), &response);
  return {status.error_code(), response.status()};
}

GrpcEndpointOptions OnePort(const std::string& address) {
  GrpcEndpointOptions options;
  options.ports = {{address, grpc::InsecureServerCredentials()}};
  return options;
}

TEST(GrpcEndpointTest, ServesHealthOnAPickedPortNotServingUntilSet) {
  auto endpoint = GrpcEndpoint::Start(OnePort("127.0.0.1:0"));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string address = (*endpoint)->bound_address(0);
  ASSERT_TRUE(absl::StartsWith(address, "127.0.0.1:")) << address;
  EXPECT_NE(address, "127.0.0.1:0");

  Check c = CheckHealth(address);
  EXPECT_EQ(c.code, grpc::StatusCode::OK);
  EXPECT_EQ(c.serving, HealthCheckResponse::NOT_SERVING);
  (*endpoint)->SetServing(true);
  c = CheckHealth(address);
  EXPECT_EQ(c.code, grpc::StatusCode::OK);
  EXPECT_EQ(c.serving, HealthCheckResponse::SERVING);
  (*endpoint)->SetServing(false);
  EXPECT_EQ(CheckHealth(address).serving, HealthCheckResponse::NOT_SERVING);
}

TEST(GrpcEndpointTest, WithoutAServiceOtherMethodsAreUnimplemented) {
  auto endpoint = GrpcEndpoint::Start(OnePort("127.0.0.1:0"));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  auto stub = gift::v1::Coordinator::NewStub(
      grpc::CreateChannel((*endpoint)->bound_address(0), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  gift::v1::StatusResponse response;
  const grpc::Status status = stub->GetStatus(&context, gift::v1::GetStatusRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST(GrpcEndpointTest, ServesEveryPortUnixSocketsAsGiven) {
  absl::StatusOr<TempDir> dir = TempDir::Create("grpc-endpoint-test");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string socket = absl::StrCat("unix:", dir->File("api.sock"));
  GrpcEndpointOptions options = OnePort(socket);
  options.ports.push_back({"127.0.0.1:0", grpc::InsecureServerCredentials()});
  auto endpoint = GrpcEndpoint::Start(std::move(options));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ((*endpoint)->bound_address(0), socket);
  (*endpoint)->SetServing(true);
  EXPECT_EQ(CheckHealth(socket).serving, HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth((*endpoint)->bound_address(1)).serving, HealthCheckResponse::SERVING);
}

TEST(GrpcEndpointTest, CountsRpcsWithTheGivenInterceptor) {
  auto metrics = MetricsServer::Start("");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  GrpcEndpointOptions options = OnePort("127.0.0.1:0");
  options.rpc_counter = MakeRpcCounterInterceptor(*(*metrics)->registry(), "gift_test_rpc_total",
                                                  {"grpc.health.v1.Health"});
  auto endpoint = GrpcEndpoint::Start(std::move(options));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_EQ(CheckHealth((*endpoint)->bound_address(0)).code, grpc::StatusCode::OK);
  ASSERT_EQ(CheckHealth((*endpoint)->bound_address(0)).code, grpc::StatusCode::OK);
  EXPECT_THAT((*metrics)->Render(), HasSubstr("gift_test_rpc_total{"));
  EXPECT_THAT((*metrics)->Render(), HasSubstr("code=\"OK\""));
}

// A port another socket listens on (without SO_REUSEPORT, which gRPC sets).
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 && listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~TakenPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(GrpcEndpointTest, ATakenPortIsUnavailableNamingTheAddresses) {
  TakenPort taken;
  ASSERT_NE(taken.port(), 0);
  const std::string address = absl::StrCat("127.0.0.1:", taken.port());
  GrpcEndpointOptions options = OnePort("127.0.0.1:0");
  options.ports.push_back({address, grpc::InsecureServerCredentials()});
  auto endpoint = GrpcEndpoint::Start(std::move(options));
  ASSERT_FALSE(endpoint.ok());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(endpoint.status().message(),
            absl::StrCat("cannot listen on 127.0.0.1:0 and ", address));
}

TEST(GrpcEndpointTest, NoPortIsInvalid) {
  auto endpoint = GrpcEndpoint::Start(GrpcEndpointOptions());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrpcEndpointTest, ShutdownStopsServingAndIsIdempotent) {
  auto endpoint = GrpcEndpoint::Start(OnePort("127.0.0.1:0"));
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const std::string address = (*endpoint)->bound_address(0);
  (*endpoint)->SetServing(true);
  (*endpoint)->Shutdown(absl::Milliseconds(100));
  (*endpoint)->Shutdown(absl::Milliseconds(100));
  EXPECT_EQ(CheckHealth(address).code, grpc::StatusCode::UNAVAILABLE);
}

TEST(WithPortTest, ReplacesThePort) {
  EXPECT_EQ(WithPort("0.0.0.0:0", 7070), "0.0.0.0:7070");
  EXPECT_EQ(WithPort("[::1]:0", 41), "[::1]:41");
}

}  // namespace
}  // namespace gift::daemon
