// Data-plane key distribution (docs/design.md section 8.2) by the Coordinator
// service on a real gRPC server on loopback: member keys in Join and
// Heartbeat answers, GetDataPlaneKeys by role, nothing when authentication
// is off; the issuer's derivation from a secret file.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/dataplane_key_issuer.h"
#include "tests/coordinator/test_util.h"
#include "tests/testing/coordinator_server.h"
#include "tests/testing/temp_dir.h"

namespace gift::coordinator {
namespace {

using testing::FakeClock;

class DataPlaneKeysTest : public ::testing::Test {
 protected:
  void Start(const DataPlaneKeyIssuer* keys, const ClusterOptions& cluster = {}) {
    auto server = test::CoordinatorServer::Start(
        {.cluster = cluster, .clock = &clock_, .dataplane_keys = keys});
    ASSERT_TRUE(server.ok()) << server.status();
    coordinator_ = *std::move(server);
    state_ = coordinator_->state();
    stub_ = coordinator_->stub();
  }

  std::unique_ptr<grpc::ClientContext> Context() { return test::DeadlineContext(); }

  gift::v1::JoinResponse Join(const std::string& name, gift::v1::MemberRole role) {
    auto response = test::JoinOverRpc(*stub_, name, role);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(gift::v1::JoinResponse());
  }

  grpc::Status Keys(const std::string& member_id, gift::v1::DataPlaneKeys* out) {
    gift::v1::GetDataPlaneKeysRequest request;
    request.set_member_id(member_id);
    return stub_->GetDataPlaneKeys(Context().get(), request, out);
  }

  FakeClock clock_;
  std::unique_ptr<DataPlaneKeyIssuer> issuer_;  // outlives the service
  std::unique_ptr<test::CoordinatorServer> coordinator_;
  ClusterStateMachine* state_ = nullptr;         // owned by coordinator_
  gift::v1::Coordinator::Stub* stub_ = nullptr;  // owned by coordinator_
};

TEST_F(DataPlaneKeysTest, OffHandsOutNothing) {
  Start(nullptr);
  const auto w = Join("w0", gift::v1::MEMBER_ROLE_WORKER);
  EXPECT_FALSE(w.has_dataplane_key());
  gift::v1::DataPlaneKeys keys;
  EXPECT_EQ(Keys(w.member_id(), &keys).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(DataPlaneKeysTest, MembersGetTheirKeyAndTheirPeers) {
  auto issuer = DataPlaneKeyIssuer::Random();
  ASSERT_TRUE(issuer.ok());
  issuer_ = *std::move(issuer);
  Start(issuer_.get());
  const auto w0 = Join("w0", gift::v1::MEMBER_ROLE_WORKER);
  const auto w1 = Join("w1", gift::v1::MEMBER_ROLE_WORKER);
  const auto s0 = Join("s0", gift::v1::MEMBER_ROLE_SERVER);
  for (const auto* j : {&w0, &w1, &s0}) {
    EXPECT_EQ(j->dataplane_key().key().size(), dataplane::kMacKeyBytes);
  }
  EXPECT_NE(w0.dataplane_key().key(), w1.dataplane_key().key());
  EXPECT_NE(w0.dataplane_key().key(), s0.dataplane_key().key());
  // Every member is told the cluster's MAC: ChaCha20-Poly1305 by default.
  for (const auto* j : {&w0, &w1, &s0}) {
    EXPECT_EQ(j->dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  }
  // The heartbeat answer carries the same key.
  gift::v1::HeartbeatRequest beat;
  beat.set_member_id(w1.member_id());
  gift::v1::HeartbeatResponse beat_response;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), beat, &beat_response).ok());
  EXPECT_EQ(beat_response.dataplane_key().key(), w1.dataplane_key().key());
  EXPECT_EQ(beat_response.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);

  // The server gets the workers' keys, by rank; a worker the server's.
  gift::v1::DataPlaneKeys for_server;
  ASSERT_TRUE(Keys(s0.member_id(), &for_server).ok());
  ASSERT_EQ(for_server.peers_size(), 2);
  for (const auto& peer : for_server.peers()) {
    const auto& joined = peer.member_id() == w0.member_id() ? w0 : w1;
    EXPECT_EQ(peer.member_id(), joined.member_id());
    EXPECT_EQ(peer.key(), joined.dataplane_key().key());
  }
  EXPECT_NE(for_server.peers(0).rank(), for_server.peers(1).rank());
  gift::v1::DataPlaneKeys for_worker;
  ASSERT_TRUE(Keys(w0.member_id(), &for_worker).ok());
  ASSERT_EQ(for_worker.peers_size(), 1);
  EXPECT_EQ(for_worker.peers(0).member_id(), s0.member_id());
  EXPECT_EQ(for_worker.peers(0).key(), s0.dataplane_key().key());
  EXPECT_EQ(for_worker.epoch(), state_->Snapshot()->epoch());
  gift::v1::DataPlaneKeys unknown;
  EXPECT_EQ(Keys("nobody", &unknown).error_code(), grpc::StatusCode::NOT_FOUND);
}

// gift-coordinator --dataplane-mac aes-256-gmac: the preferred MAC is what
// the state and every Join and Heartbeat answer name.
TEST_F(DataPlaneKeysTest, MembersAreToldTheMacTheCoordinatorPrefers) {
  auto issuer = DataPlaneKeyIssuer::Random();
  ASSERT_TRUE(issuer.ok());
  issuer_ = *std::move(issuer);
  Start(issuer_.get(), {.dataplane_mac = gift::v1::MAC_ALGORITHM_AES_256_GMAC});
  const auto w0 = Join("w0", gift::v1::MEMBER_ROLE_WORKER);
  EXPECT_EQ(w0.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  EXPECT_EQ(w0.state().dataplane_mac(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  gift::v1::HeartbeatRequest beat;
  beat.set_member_id(w0.member_id());
  gift::v1::HeartbeatResponse beat_response;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), beat, &beat_response).ok());
  EXPECT_EQ(beat_response.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
}

// MAC negotiation (docs/design.md section 8.2): a member of a build before
// it lists no MACs and can use AES-256-GMAC only, so every epoch it is in
// uses that, and the members of this build are told so in the state and in
// their heartbeat answers; once it has left, the next epoch is back on the
// preferred MAC. A member listing more MACs than any build has is refused.
TEST_F(DataPlaneKeysTest, AMemberOfAnOlderBuildPutsItsEpochsOnAes256Gmac) {
  auto issuer = DataPlaneKeyIssuer::Random();
  ASSERT_TRUE(issuer.ok());
  issuer_ = *std::move(issuer);
  Start(issuer_.get());
  const auto w0 = Join("w0", gift::v1::MEMBER_ROLE_WORKER);
  const auto s0 = Join("s0", gift::v1::MEMBER_ROLE_SERVER);
  EXPECT_EQ(s0.state().dataplane_mac(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  EXPECT_EQ(s0.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);

  gift::v1::JoinRequest old_build;  // no dataplane_macs
  old_build.set_name("w1");
  old_build.set_role(gift::v1::MEMBER_ROLE_WORKER);
  gift::v1::JoinResponse old;
  ASSERT_TRUE(stub_->Join(Context().get(), old_build, &old).ok());
  EXPECT_EQ(old.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  EXPECT_EQ(old.state().dataplane_mac(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  const uint64_t mixed_epoch = old.state().epoch();
  gift::v1::HeartbeatRequest beat;
  beat.set_member_id(w0.member_id());
  gift::v1::HeartbeatResponse beat_response;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), beat, &beat_response).ok());
  EXPECT_EQ(beat_response.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_AES_256_GMAC);

  gift::v1::LeaveRequest leave;
  leave.set_member_id(old.member_id());
  gift::v1::LeaveResponse left;
  ASSERT_TRUE(stub_->Leave(Context().get(), leave, &left).ok());
  const auto after = state_->Snapshot();
  EXPECT_GT(after->epoch(), mixed_epoch);
  EXPECT_EQ(after->dataplane_mac(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), beat, &beat_response).ok());
  EXPECT_EQ(beat_response.dataplane_key().algorithm(), gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305);

  gift::v1::JoinRequest too_many = old_build;
  too_many.set_name("w2");
  for (int i = 0; i < 9; ++i) too_many.add_dataplane_macs(gift::v1::MAC_ALGORITHM_AES_256_GMAC);
  gift::v1::JoinResponse refused;
  EXPECT_EQ(stub_->Join(Context().get(), too_many, &refused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Node-local aggregation runs with authentication: SetPolicy accepts it, and
// each worker's GetDataPlaneKeys carries its node's key (docs/design.md
// section 8.2): the same for the workers of one node, another for another
// node, none for a server or a worker without a node.
TEST_F(DataPlaneKeysTest, WorkersGetTheirNodesKeyAndNodeHierarchyIsAcceptedWithAuthentication) {
  auto issuer = DataPlaneKeyIssuer::Random();
  ASSERT_TRUE(issuer.ok());
  issuer_ = *std::move(issuer);
  Start(issuer_.get());
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->set_hierarchy(gift::v1::HIERARCHY_NODE);
  gift::v1::Policy answer;
  const grpc::Status set_status = stub_->SetPolicy(Context().get(), set, &answer);
  ASSERT_TRUE(set_status.ok()) << set_status.error_message();
  EXPECT_EQ(answer.hierarchy(), gift::v1::HIERARCHY_NODE);

  auto join = [&](const std::string& name, gift::v1::MemberRole role, const std::string& node) {
    auto joined = test::JoinOverRpc(*stub_, name, role, node);
    EXPECT_TRUE(joined.ok()) << joined.status();
    gift::v1::DataPlaneKeys keys;
    EXPECT_TRUE(Keys(joined.value_or(gift::v1::JoinResponse()).member_id(), &keys).ok());
    return keys;
  };
  const auto a0 = join("a0", gift::v1::MEMBER_ROLE_WORKER, "node-a");
  const auto a1 = join("a1", gift::v1::MEMBER_ROLE_WORKER, "node-a");
  const auto b0 = join("b0", gift::v1::MEMBER_ROLE_WORKER, "node-b");
  const auto alone = join("c0", gift::v1::MEMBER_ROLE_WORKER, "");
  const auto server = join("s0", gift::v1::MEMBER_ROLE_SERVER, "node-a");
  EXPECT_EQ(a0.node(), "node-a");
  EXPECT_EQ(a0.node_key().size(), dataplane::kMacKeyBytes);
  EXPECT_EQ(a0.node_key(), a1.node_key());
  EXPECT_EQ(b0.node(), "node-b");
  EXPECT_EQ(b0.node_key().size(), dataplane::kMacKeyBytes);
  EXPECT_NE(b0.node_key(), a0.node_key());
  EXPECT_TRUE(alone.node_key().empty());
  EXPECT_TRUE(server.node_key().empty());
  // Derived from the secret: the issuer gives the same key again.
  auto again = issuer_->NodeKey("node-a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a0.node_key(), std::string(again->begin(), again->end()));
}

TEST_F(DataPlaneKeysTest, NodeHierarchyIsAcceptedWithoutAuthentication) {
  Start(nullptr);
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->set_hierarchy(gift::v1::HIERARCHY_NODE);
  gift::v1::Policy answer;
  const grpc::Status set_status = stub_->SetPolicy(Context().get(), set, &answer);
  ASSERT_TRUE(set_status.ok()) << set_status.error_message();
  EXPECT_EQ(answer.hierarchy(), gift::v1::HIERARCHY_NODE);
}

TEST(DataPlaneKeyIssuerTest, KeysFollowTheSecretFile) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.File(name), std::ios::binary) << bytes;
    return dir.File(name);
  };
  const std::string a = write("a", std::string(40, 'a'));
  const std::string b = write("b", std::string(32, 'b'));
  auto a1 = DataPlaneKeyIssuer::FromFile(a);
  auto a2 = DataPlaneKeyIssuer::FromFile(a);
  auto b1 = DataPlaneKeyIssuer::FromFile(b);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  // A restart with the same secret gives the same keys.
  EXPECT_EQ((*a1)->MemberKey("m-1").value(), (*a2)->MemberKey("m-1").value());
  EXPECT_NE((*a1)->MemberKey("m-1").value(), (*a1)->MemberKey("m-2").value());
  EXPECT_NE((*a1)->MemberKey("m-1").value(), (*b1)->MemberKey("m-1").value());
  EXPECT_EQ(DataPlaneKeyIssuer::FromFile(write("short", std::string(31, 'x'))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataPlaneKeyIssuer::FromFile(dir.File("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

// Without a secret file the coordinator draws one once and keeps it next to
// its state file, so a restart (the second KeptAt) keeps every key.
TEST(DataPlaneKeyIssuerTest, ADrawnSecretIsKeptAcrossRestarts) {
  const gift::TempDir dir = test::NewTempDir("gift-dataplane-kept");
  const std::string path = dir.File("state.db.dataplane-secret");
  auto first = DataPlaneKeyIssuer::KeptAt(path);
  ASSERT_TRUE(first.ok()) << first.status();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(dataplane::kMacKeyBytes));
  auto again = DataPlaneKeyIssuer::KeptAt(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*first)->MemberKey("m-1").value(), (*again)->MemberKey("m-1").value());
  auto other = DataPlaneKeyIssuer::KeptAt(dir.File("other.dataplane-secret"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*first)->MemberKey("m-1").value(), (*other)->MemberKey("m-1").value());
  EXPECT_EQ(DataPlaneKeyIssuer::KeptAt(dir.File("no-such-dir/secret")).status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gift::coordinator
