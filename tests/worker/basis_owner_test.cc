// BasisOwner against a coordinator on loopback (the real state machine and
// gRPC service in process): a refresh publishes a basis, and one whose
// cancel flag is up (SIGTERM / shutdown) gives up between its pieces of work
// without publishing.
#include "worker/basis_owner.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/state_store.h"
#include "tests/coordinator/test_util.h"
#include "worker/basis_store.h"

namespace gift::worker {
namespace {

constexpr int64_t kRows = 64, kCols = 64;

class BasisOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = coordinator::StateStore::Open(dir_.File("state.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = coordinator::ClusterStateMachine::Create({}, *std::move(store),
                                                          coordinator::RealClock());
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = *std::move(state);
    // Every transformable tensor transformed, whatever the measurement says.
    gift::v1::SetPolicyRequest set;
    gift::v1::TensorOverride* o = set.mutable_policy()->add_overrides();
    o->set_glob("*");
    o->set_enabled(true);
    ASSERT_TRUE(state_->SetPolicy(set).ok());
    service_ = std::make_unique<coordinator::CoordinatorService>(state_.get(), "test");
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto session = control::MemberSession::Start(
        control::CoordinatorClient::MakeChannel(absl::StrCat("127.0.0.1:", port)),
        {.name = "owner"});
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    gift::v1::RegisterTensorsRequest request;
    request.set_member_id(session_->member_id());
    gift::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name("layers.0.w");
    spec->add_shape(kRows);
    spec->add_shape(kCols);
    spec->set_dtype(gift::v1::DTYPE_FLOAT32);
    auto registered = state_->RegisterTensors(request);
    ASSERT_TRUE(registered.ok()) << registered.status();
    tensor_id_ = registered->tensors(0).tensor_id();
    const std::string me = session_->member_id();
    auto owned = session_->WaitFor(
        [&](const gift::v1::ClusterState& s) {
          const gift::v1::TensorBasisState* b = FindBasisState(s, tensor_id_);
          return b != nullptr && b->owner_member_id() == me && s.policy().overrides_size() == 1;
        },
        absl::Seconds(10));
    ASSERT_TRUE(owned.ok()) << owned.status();
  }

  void TearDown() override {
    if (session_ != nullptr) session_->Close().IgnoreError();
    if (server_ != nullptr) {
      service_->Shutdown();
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
    }
  }

  // A step whose statistics make the geometry ready and a first refresh due.
  OwnedTensorStep Step() const {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    OwnedTensorStep step{.step = 1, .tensor_id = tensor_id_, .name = "layers.0.w",
                         .rows = kRows, .cols = kCols};
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      step.average.push_back(normal(rng) * static_cast<float>(1 + i % kCols));
      step.own.push_back(step.average.back() + 0.1f * normal(rng));
    }
    return step;
  }

  coordinator::testing::TempDir dir_;
  std::unique_ptr<coordinator::ClusterStateMachine> state_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<control::MemberSession> session_;
  uint64_t tensor_id_ = 0;
};

TEST_F(BasisOwnerTest, RefreshPublishesAVersion) {
  BasisStore store(session_.get());
  BasisOwner owner(session_.get(), &store, {});
  const absl::Status s = owner.Observe(*session_->state(), Step());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(owner.publications(), 1u);
}

TEST_F(BasisOwnerTest, CancelledRefreshStopsWithoutPublishing) {
  BasisStore store(session_.get());
  int checks = 0;
  BasisOwner owner(session_.get(), &store, {.cancelled = [&] {
                     ++checks;
                     return true;
                   }});
  const absl::Status s = owner.Observe(*session_->state(), Step());
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(checks, 1);  // before the first candidate basis is built
  EXPECT_EQ(owner.publications(), 0u);
  const gift::v1::TensorBasisState* b = FindBasisState(*state_->Snapshot(), tensor_id_);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->has_proposal());
  EXPECT_EQ(b->versions_size(), 1);  // only the direct version 0
}

}  // namespace
}  // namespace gift::worker
