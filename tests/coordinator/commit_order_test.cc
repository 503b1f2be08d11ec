// Red-team regressions of the coordinator's state machine: out-of-range
// policy values are refused naming the field and the value, and a change
// whose commit fails (the state file turned read-only, as a full disk does)
// answers an error and is not applied in memory either.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "server/coordinator/cluster_state.h"
#include "tests/coordinator/cluster_state_fixture.h"

namespace gift::coordinator {
namespace {

using testing::ClusterStateMachineTest;
using ::testing::HasSubstr;

using PolicyValidationTest = ClusterStateMachineTest;
using CommitOrderTest = ClusterStateMachineTest;

TEST_F(PolicyValidationTest, HugeRankIsRefusedNamingTheField) {
  // giftctl policy set --rank 99999999 was accepted; no basis was ever built.
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_transform()->set_rank(99999999);
  const absl::Status s = state_->SetPolicy(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("transform.rank = 99999999"));
  EXPECT_EQ(state_->GetPolicy().version(), 1u);

  gift::v1::SetRankRequest rank;
  rank.set_rank(99999999);
  rank.set_tensor_glob("*");
  const absl::Status r = state_->SetRank(rank).status();
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.message(), HasSubstr("overrides[0].rank = 99999999"));
  EXPECT_EQ(state_->GetPolicy().overrides_size(), 0);
}

TEST_F(PolicyValidationTest, RankIsBoundedByTheKnownTensors) {
  Register({{"layers.0.mlp", {8, 16}}, {"layers.0.attn", {32, 48}}});
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_transform()->set_rank(49);  // above every dimension
  absl::Status s = state_->SetPolicy(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("transform.rank = 49"));
  EXPECT_THAT(s.message(), HasSubstr("layers.0.attn"));
  request.mutable_policy()->mutable_transform()->set_rank(48);
  EXPECT_TRUE(state_->SetPolicy(request).ok());

  // An override is bounded by the tensors its glob matches.
  gift::v1::SetRankRequest rank;
  rank.set_tensor_glob("*.mlp");
  rank.set_rank(17);
  s = state_->SetRank(rank).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("overrides[0].rank = 17"));
  rank.set_rank(16);
  EXPECT_TRUE(state_->SetRank(rank).ok());
}

TEST_F(PolicyValidationTest, RanksAreCheckedAgainWhenTensorsRegister) {
  // Before any tensor is known only the absolute bound applies...
  gift::v1::SetRankRequest rank;
  rank.set_tensor_glob("big.*");
  rank.set_rank(1000);
  ASSERT_TRUE(state_->SetRank(rank).ok());
  // ...and a registration the stored rank cannot apply to is refused whole.
  gift::v1::RegisterTensorsRequest request;
  for (const char* name : {"small.w", "big.w"}) {
    gift::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name(name);
    spec->add_shape(8);
    spec->add_shape(16);
    spec->set_dtype(gift::v1::DTYPE_FLOAT32);
  }
  const absl::Status s = state_->RegisterTensors(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("overrides[0].rank = 1000"));
  EXPECT_EQ(state_->Snapshot()->tensors_size(), 0);
  // A tensor the override does not match registers.
  EXPECT_EQ(Register({{"small.w", {8, 16}}}).size(), 1u);
}

TEST_F(PolicyValidationTest, HugePowerIsRefusedNamingTheField) {
  // giftctl policy set --power 1e300 was accepted.
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_transform()->add_powers(1e300);
  const absl::Status s = state_->SetPolicy(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("transform.powers[0] = 1e+300"));
  EXPECT_THAT(s.message(), HasSubstr("(0, 1]"));
  EXPECT_EQ(state_->GetPolicy().version(), 1u);
}

TEST_F(CommitOrderTest, FailedPolicyCommitIsNotApplied) {
  // A policy change whose commit failed (disk full) answered an error but
  // was applied in memory anyway.
  const uint64_t revision = state_->revision();
  ASSERT_TRUE(store_->SetReadOnlyForTesting(true).ok());
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_refresh()->set_period_steps(25);
  const absl::Status s = state_->SetPolicy(request).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(state_->GetPolicy().version(), 1u);
  EXPECT_EQ(state_->GetPolicy().refresh().period_steps(), 10u);
  EXPECT_EQ(state_->revision(), revision);
  EXPECT_EQ(state_->Snapshot()->policy().version(), 1u);

  // Once the disk works again the same request applies, once.
  ASSERT_TRUE(store_->SetReadOnlyForTesting(false).ok());
  auto set = state_->SetPolicy(request);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->version(), 2u);
  Open();  // and it is what a restart reads
  EXPECT_EQ(state_->GetPolicy().refresh().period_steps(), 25u);
}

TEST_F(CommitOrderTest, FailedMembershipAndBasisCommitsAreNotApplied) {
  const std::string a = Join("a").member_id();
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  const uint64_t epoch = state_->Snapshot()->epoch();
  int notified = 0;
  state_->SetChangeCallback([&] { ++notified; });
  ASSERT_TRUE(store_->SetReadOnlyForTesting(true).ok());

  gift::v1::JoinRequest join;
  join.set_name("b");
  join.set_role(gift::v1::MEMBER_ROLE_WORKER);
  EXPECT_EQ(state_->Join(join).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(state_->Snapshot()->workers_size(), 1);
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);

  EXPECT_EQ(Publish(a, t, 1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Basis(t.tensor_id()).versions_size(), 1);  // only the direct version 0
  EXPECT_FALSE(Basis(t.tensor_id()).has_proposal());

  EXPECT_EQ(Leave(a).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(state_->Snapshot()->workers_size(), 1);
  // The lease renewed in memory survives the rollbacks: the member is live.
  EXPECT_TRUE(Heartbeat(a, 0).ok());
  EXPECT_EQ(notified, 0);  // no watcher saw an uncommitted revision

  ASSERT_TRUE(store_->SetReadOnlyForTesting(false).ok());
  EXPECT_TRUE(state_->Join(join).ok());
  ASSERT_TRUE(Publish(a, t, 1).ok());  // version 1 was never taken
  EXPECT_GT(notified, 0);
}

TEST_F(CommitOrderTest, LeaseExpiryWhoseCommitFailsIsRetried) {
  const std::string a = Join("a").member_id();
  Join("b");
  ASSERT_TRUE(store_->SetReadOnlyForTesting(true).ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(Heartbeat(a, 0).ok());  // renews a's lease (no commit needed)
  clock_.Advance(absl::Seconds(6));   // b's lease is over
  EXPECT_EQ(state_->ExpireLeases().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(state_->Snapshot()->workers_size(), 2);  // the expiry did not commit
  ASSERT_TRUE(store_->SetReadOnlyForTesting(false).ok());
  ASSERT_TRUE(state_->ExpireLeases().ok());
  ASSERT_EQ(state_->Snapshot()->workers_size(), 1);
  EXPECT_EQ(state_->Snapshot()->workers(0).member_id(), a);
}

}  // namespace
}  // namespace gift::coordinator
