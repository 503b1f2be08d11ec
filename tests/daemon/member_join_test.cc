// JoinCluster against a real Coordinator service on loopback (in-process,
// served by a GrpcEndpoint): the session's name and role, the `joined` log
// line with the daemon's rank field, and the error of an unreachable
// coordinator.
#include "common/daemon/member_join.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/temp_dir.h"
#include "common/daemon/grpc_endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/state_store.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class MemberJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create("member-join-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *std::move(dir);
    auto store = coordinator::StateStore::Open(dir_->File("state.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = coordinator::ClusterStateMachine::Create(coordinator::ClusterOptions(),
                                                          *std::move(store),
                                                          coordinator::RealClock());
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = *std::move(state);
    service_ = std::make_unique<coordinator::CoordinatorService>(state_.get(), "test");
    GrpcEndpointOptions options;
    options.ports = {{"127.0.0.1:0", grpc::InsecureServerCredentials()}};
    options.service = service_.get();
    auto endpoint = GrpcEndpoint::Start(std::move(options));
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
  }

  void TearDown() override {
    if (endpoint_ == nullptr) return;
    service_->Shutdown();
    endpoint_->Shutdown(absl::Milliseconds(200));
  }

  std::optional<TempDir> dir_;
  std::unique_ptr<coordinator::ClusterStateMachine> state_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<GrpcEndpoint> endpoint_;
};

TEST_F(MemberJoinTest, JoinsWithTheFlagsNameAndLogsTheRankField) {
  const MemberFlags flags{.coordinator = endpoint_->bound_address(0), .name = "host-1/server-1"};
  control::MemberSessionOptions options;
  options.role = gift::v1::MEMBER_ROLE_SERVER;
  options.data_address = "ucx:shard-0";
  ::testing::internal::CaptureStderr();
  auto session = JoinCluster(flags, grpc::InsecureChannelCredentials(), options, "shard");
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->rank(), 0u);
  EXPECT_THAT(log, HasSubstr(R"("event":"joined")"));
  EXPECT_THAT(log, HasSubstr(absl::StrCat(R"("coordinator":")", flags.coordinator, R"(")")));
  EXPECT_THAT(log, HasSubstr(absl::StrCat(R"("member_id":")", (*session)->member_id(), R"(")")));
  EXPECT_THAT(log, HasSubstr(R"("shard":0)"));

  // The coordinator knows the member by the flags' name and the options' role.
  absl::StatusOr<gift::v1::StatusResponse> status = state_->GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->state().servers_size(), 1);
  EXPECT_EQ(status->state().servers(0).name(), "host-1/server-1");
  EXPECT_EQ(status->state().servers(0).member_id(), (*session)->member_id());
  EXPECT_TRUE((*session)->Close().ok());
}

TEST_F(MemberJoinTest, ASecondMemberOfTheSameNameIsRefusedNamingTheCoordinator) {
  const MemberFlags flags{.coordinator = endpoint_->bound_address(0), .name = "host-1/worker-1"};
  control::MemberSessionOptions options;
  options.data_address = "ucx:worker-0";
  auto first = JoinCluster(flags, grpc::InsecureChannelCredentials(), options, "rank");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = JoinCluster(flags, grpc::InsecureChannelCredentials(), options, "rank");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(second.status().message()),
              StartsWith(absl::StrCat("joining ", flags.coordinator, ": ")));
  EXPECT_TRUE((*first)->Close().ok());
}

}  // namespace
}  // namespace gift::daemon
