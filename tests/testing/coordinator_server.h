// The coordinator in the test's own process: the real ClusterStateMachine
// over a fresh SQLite file (in a private temp dir), the real
// CoordinatorService, and a grpc::Server serving it on a loopback port the
// kernel picks. For tests of the service itself and of clients that dial it
// (member sessions, the basis owner) without a gift-coordinator process.
//
//   FakeClock clock;  // outlives the server
//   auto server = test::CoordinatorServer::Start({.clock = &clock});
//   ASSERT_TRUE(server.ok()) << server.status();
//   (*server)->stub()->Join(test::DeadlineContext().get(), request, &response);
//
// Ownership: the CoordinatorServer owns the directory, the state machine,
// the service and the gRPC server; no child process is started. The
// destructor shuts the service down (Watch streams end), stops the server
// (1 s grace) and removes the directory. `clock` and `dataplane_keys` are
// not owned and must outlive it. Thread safety: the accessors may be used
// from any thread; the destructor must not race with calls through them.
#ifndef GIFT_TESTS_TESTING_COORDINATOR_SERVER_H_
#define GIFT_TESTS_TESTING_COORDINATOR_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/temp_dir.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/dataplane_key_issuer.h"

namespace gift::test {

struct CoordinatorServerOptions {
  coordinator::ClusterOptions cluster = {};
  coordinator::Clock* clock = nullptr;  // null: coordinator::RealClock()
  // Not null: data-plane authentication on (coordinator_service.h), with
  // cluster.dataplane_mac, or ChaCha20-Poly1305 when that is unspecified
  // (gift-coordinator's default).
  const coordinator::DataPlaneKeyIssuer* dataplane_keys = nullptr;
  // Serve grpc.health.v1 too, reporting SERVING.
  bool health_service = false;
  std::string version = "test-version";  // what GetStatus reports
};

class CoordinatorServer {
 public:
  // Fails with the store's or the state machine's status, or INTERNAL when
  // the gRPC server does not start.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorServerOptions& options = {});
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  gift::v1::Coordinator::Stub* stub() const { return stub_.get(); }
  coordinator::ClusterStateMachine* state() const { return state_.get(); }
  coordinator::CoordinatorService* service() const { return service_.get(); }

 private:
  explicit CoordinatorServer(gift::TempDir dir) : dir_(std::move(dir)) {}

  gift::TempDir dir_;
  std::unique_ptr<coordinator::ClusterStateMachine> state_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gift::v1::Coordinator::Stub> stub_;
};

// A client context whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> DeadlineContext(absl::Duration timeout = absl::Seconds(10));

// A Join RPC of a member `name` with `role` on `node` (deadline 10 s): the
// answer, or the call's status.
absl::StatusOr<gift::v1::JoinResponse> JoinOverRpc(gift::v1::Coordinator::Stub& stub,
                                                   const std::string& name,
                                                   gift::v1::MemberRole role,
                                                   const std::string& node = "");

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_COORDINATOR_SERVER_H_
