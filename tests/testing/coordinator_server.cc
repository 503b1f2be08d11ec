#include "tests/testing/coordinator_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dataplane/chunk_header.h"
#include "common/rpc/grpc_status.h"
#include "server/coordinator/state_store.h"
#include "tests/testing/temp_dir.h"

namespace gift::test {

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorServerOptions& options) {
  auto dir = CreateTempDir("gift-coord-server");
  if (!dir.ok()) return dir.status();
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer(*std::move(dir)));
  auto store = coordinator::StateStore::Open(s->dir_.File("state.db"));
  if (!store.ok()) return store.status();
  coordinator::ClusterOptions cluster = options.cluster;
  if (options.dataplane_keys != nullptr &&
      cluster.dataplane_mac == gift::v1::MAC_ALGORITHM_UNSPECIFIED) {
    cluster.dataplane_mac = gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305;  // as gift-coordinator's
  }
  auto state = coordinator::ClusterStateMachine::Create(
      cluster, *std::move(store),
      options.clock != nullptr ? options.clock : coordinator::RealClock());
  if (!state.ok()) return state.status();
  s->state_ = *std::move(state);
  s->service_ = std::make_unique<coordinator::CoordinatorService>(s->state_.get(), options.version,
                                                                  options.dataplane_keys);
  if (options.health_service) grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || port == 0) {
    return absl::InternalError("the coordinator's gRPC server did not start on 127.0.0.1:0");
  }
  if (options.health_service) s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->address_ = absl::StrCat("127.0.0.1:", port);
  s->channel_ = grpc::CreateChannel(s->address_, grpc::InsecureChannelCredentials());
  s->stub_ = gift::v1::Coordinator::NewStub(s->channel_);
  return s;
}

CoordinatorServer::~CoordinatorServer() {
  if (server_ == nullptr) return;
  service_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

std::unique_ptr<grpc::ClientContext> DeadlineContext(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return context;
}

absl::StatusOr<gift::v1::JoinResponse> JoinOverRpc(gift::v1::Coordinator::Stub& stub,
                                                   const std::string& name,
                                                   gift::v1::MemberRole role,
                                                   const std::string& node) {
  gift::v1::JoinRequest request;
  request.set_name(name);
  request.set_role(role);
  request.set_node(node);
  // As a member of this build does (member_session.cc).
  for (dataplane::MacAlgorithm mac : dataplane::kMacAlgorithms) {
    request.add_dataplane_macs(static_cast<gift::v1::MacAlgorithm>(mac));
  }
  gift::v1::JoinResponse response;
  const grpc::Status status = stub.Join(DeadlineContext().get(), request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "Join");
  return response;
}

}  // namespace gift::test
