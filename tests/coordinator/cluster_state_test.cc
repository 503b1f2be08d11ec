// ClusterStateMachine with a fake clock and a real SQLite file: membership, epochs
// and ranks, owners, shard map, the refresh negotiation, policy, drain, and
// restart.
#include "server/coordinator/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "server/coordinator/state_store.h"
#include "tests/coordinator/cluster_state_fixture.h"
#include "tests/coordinator/test_util.h"

namespace gift::coordinator {
namespace {

using testing::ClusterStateMachineTest;
using ::testing::ElementsAre;
using testing::FakeClock;
using ::testing::HasSubstr;
using testing::MakeBasisBytes;

TEST_F(ClusterStateMachineTest, JoinsBumpTheEpochAndGetDenseRanks) {
  EXPECT_EQ(state_->Snapshot()->epoch(), 0u);
  gift::v1::JoinResponse a = Join("a");
  gift::v1::JoinResponse b = Join("b");
  gift::v1::JoinResponse s = Join("s0", gift::v1::MEMBER_ROLE_SERVER);
  EXPECT_EQ(a.rank(), 0u);
  EXPECT_EQ(b.rank(), 1u);
  EXPECT_EQ(s.rank(), 0u);  // shard id
  EXPECT_EQ(b.epoch(), 2u);
  EXPECT_EQ(s.epoch(), 3u);
  EXPECT_EQ(a.lease_ttl_ms(), 10000);
  EXPECT_EQ(s.state().workers_size(), 2);
  EXPECT_EQ(s.state().servers_size(), 1);
  EXPECT_NE(a.member_id(), b.member_id());
}

TEST_F(ClusterStateMachineTest, RejectsBadAndDuplicateJoins) {
  Join("a");
  gift::v1::JoinRequest request;
  request.set_name("a");
  request.set_role(gift::v1::MEMBER_ROLE_WORKER);
  EXPECT_EQ(state_->Join(request).status().code(), absl::StatusCode::kAlreadyExists);
  request.set_name("");
  EXPECT_EQ(state_->Join(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_name("b");
  request.set_role(gift::v1::MEMBER_ROLE_UNSPECIFIED);
  EXPECT_EQ(state_->Join(request).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state_->Snapshot()->epoch(), 1u);
}

TEST_F(ClusterStateMachineTest, SurvivorsKeepTheirRanksAndHolesAreRefilled) {
  std::vector<std::string> ids;
  for (const char* name : {"a", "b", "c", "d"}) ids.push_back(Join(name).member_id());
  ASSERT_TRUE(Leave(ids[1]).ok());  // b (rank 1) leaves: d (rank 3) moves into the hole
  EXPECT_EQ(Ranks(), (std::map<std::string, uint32_t>{{"a", 0}, {"c", 2}, {"d", 1}}));
  EXPECT_EQ(state_->Snapshot()->epoch(), 5u);
  Join("e");  // the new member takes the next rank
  EXPECT_EQ(Ranks(), (std::map<std::string, uint32_t>{{"a", 0}, {"c", 2}, {"d", 1}, {"e", 3}}));
  ASSERT_TRUE(Leave(ids[3]).ok());  // d (rank 1) leaves: e (rank 3) fills it; a, c stay
  EXPECT_EQ(Ranks(), (std::map<std::string, uint32_t>{{"a", 0}, {"c", 2}, {"e", 1}}));
}

// Random joins and leaves: ranks stay dense, and a survivor keeps its rank
// whenever it is below the new member count.
TEST_F(ClusterStateMachineTest, RanksStayDenseAndStableUnderChurn) {
  std::mt19937 rng(42);
  std::vector<std::string> live;
  int next_name = 0;
  for (int op = 0; op < 60; ++op) {
    std::map<std::string, uint32_t> before;
    for (const auto& m : state_->Snapshot()->workers()) before[m.member_id()] = m.rank();
    if (live.empty() || rng() % 3 != 0) {
      live.push_back(Join(absl::StrCat("n", next_name++)).member_id());
    } else {
      const size_t victim = rng() % live.size();
      ASSERT_TRUE(Leave(live[victim]).ok());
      live.erase(live.begin() + victim);
    }
    std::shared_ptr<const gift::v1::ClusterState> s = state_->Snapshot();
    const uint32_t count = s->workers_size();
    ASSERT_EQ(count, live.size());
    for (uint32_t r = 0; r < count; ++r) {
      EXPECT_EQ(s->workers(r).rank(), r);  // ordered by rank, dense
      auto it = before.find(s->workers(r).member_id());
      if (it != before.end() && it->second < count) {
        EXPECT_EQ(it->second, r);
      }
    }
  }
}

TEST_F(ClusterStateMachineTest, LeaseExpiryBumpsTheEpochAndReassignsRanksAndOwners) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  std::vector<gift::v1::TensorInfo> t = Register({{"w0", {64, 64}}, {"w1", {64, 32}}});
  std::map<std::string, int> owned;
  for (const auto& basis : state_->Snapshot()->bases()) owned[basis.owner_member_id()]++;
  EXPECT_EQ(owned, (std::map<std::string, int>{{a, 1}, {b, 1}}));  // spread evenly

  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(b, 0).ok());  // only b renews
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(state_->ExpireLeases().ok());
  std::shared_ptr<const gift::v1::ClusterState> s = state_->Snapshot();
  EXPECT_EQ(s->epoch(), 3u);
  ASSERT_EQ(s->workers_size(), 1);
  EXPECT_EQ(s->workers(0).member_id(), b);
  EXPECT_EQ(s->workers(0).rank(), 0u);  // moved into the hole left by a
  for (const auto& basis : s->bases()) EXPECT_EQ(basis.owner_member_id(), b);

  // The expired member learns that it must join again; unknown ids are NOT_FOUND.
  absl::Status stale = Heartbeat(a, 0);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("join again"));
  EXPECT_EQ(Heartbeat("m999", 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Heartbeat("", 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterStateMachineTest, ShardMapFollowsServersAndRegistrations) {
  std::vector<gift::v1::TensorInfo> t = Register({{"w", {64, 64}}, {"b", {64}}});
  EXPECT_EQ(state_->Snapshot()->shard_map().chunks_size(), 0);  // no servers yet
  const std::string s0 = Join("s0", gift::v1::MEMBER_ROLE_SERVER).member_id();
  const gift::v1::ShardMap one = state_->Snapshot()->shard_map();
  EXPECT_EQ(one.epoch(), 1u);
  ASSERT_EQ(one.chunks_size(), 5);  // 4 chunks of 16 rows, 1 for the bias
  for (const auto& c : one.chunks()) EXPECT_EQ(c.server_rank(), 0u);
  Join("s1", gift::v1::MEMBER_ROLE_SERVER);
  const gift::v1::ShardMap two = state_->Snapshot()->shard_map();
  EXPECT_EQ(two.epoch(), 2u);
  std::map<uint32_t, uint64_t> load;
  for (const auto& c : two.chunks()) load[c.server_rank()] += c.num_elements();
  EXPECT_EQ(load.size(), 2u);
  // A registration within the epoch keeps the existing assignment.
  Register({{"w2", {32, 32}}});
  const gift::v1::ShardMap three = state_->Snapshot()->shard_map();
  EXPECT_EQ(three.epoch(), 2u);
  EXPECT_GE(three.chunks_size(), 6);  // w2's chunk, split to balance the servers
  for (int i = 0; i < two.chunks_size(); ++i) {
    EXPECT_EQ(three.chunks(i).server_rank(), two.chunks(i).server_rank());
  }
  ASSERT_TRUE(Leave(s0).ok());
  for (const auto& c : state_->Snapshot()->shard_map().chunks()) EXPECT_EQ(c.server_rank(), 0u);
}

TEST_F(ClusterStateMachineTest, RegistrationIsIdempotentAndRejectsConflicts) {
  std::vector<gift::v1::TensorInfo> first = Register({{"w", {8, 16}}});
  std::vector<gift::v1::TensorInfo> again = Register({{"w", {8, 16}}});
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(first[0].tensor_id(), again[0].tensor_id());
  EXPECT_EQ(first[0].num_elements(), 128u);
  const gift::v1::TensorBasisState basis = Basis(first[0].tensor_id());
  ASSERT_EQ(basis.versions_size(), 1);
  EXPECT_EQ(basis.versions(0).version(), 0u);
  EXPECT_EQ(basis.versions(0).activation_step(), 0u);
  EXPECT_TRUE(basis.versions(0).direct());

  gift::v1::RegisterTensorsRequest request;
  gift::v1::TensorSpec* spec = request.add_tensors();
  spec->set_name("w");
  spec->add_shape(16);
  spec->add_shape(8);
  spec->set_dtype(gift::v1::DTYPE_FLOAT32);
  absl::Status conflict = state_->RegisterTensors(request).status();
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(conflict.message(), HasSubstr("[8, 16]"));
  spec->set_name("z");
  spec->set_shape(0, 0);
  EXPECT_EQ(state_->RegisterTensors(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_member_id("m42");
  EXPECT_EQ(state_->RegisterTensors(request).status().code(), absl::StatusCode::kNotFound);
}

// A worker whose registration is refused is marked in the state (a new
// revision: the others learn at once that it cannot push); its next good
// registration clears the mark.
TEST_F(ClusterStateMachineTest, ARefusedRegistrationMarksTheWorkerUntilItsNextGoodOne) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  gift::v1::RegisterTensorsRequest good = testing::MakeRegisterRequest({{"w", {8, 16}}});
  good.set_member_id(a);
  ASSERT_TRUE(state_->RegisterTensors(good).ok());
  gift::v1::RegisterTensorsRequest bad = testing::MakeRegisterRequest({{"w", {16, 8}}});
  bad.set_member_id(b);
  const uint64_t before = state_->revision();
  EXPECT_EQ(state_->RegisterTensors(bad).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_GT(state_->revision(), before);
  auto worker = [&](const std::string& id) {
    for (const gift::v1::Member& m : state_->Snapshot()->workers()) {
      if (m.member_id() == id) return m;
    }
    return gift::v1::Member();
  };
  EXPECT_THAT(worker(b).registration_error(), HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(worker(b).registration_error(), HasSubstr("[8, 16]"));
  EXPECT_EQ(worker(a).registration_error(), "");
  // The same refusal again: no new revision.
  const uint64_t marked = state_->revision();
  EXPECT_FALSE(state_->RegisterTensors(bad).ok());
  EXPECT_EQ(state_->revision(), marked);
  good.set_member_id(b);
  ASSERT_TRUE(state_->RegisterTensors(good).ok());
  EXPECT_EQ(worker(b).registration_error(), "");
}

// A new run: a generation whose step 0 is above every step begun, the
// tensors dropped (so new shapes register), a new epoch; the same id again
// changes nothing; the run survives a restart.
TEST_F(ClusterStateMachineTest, ANewRunDropsTheTensorsAndStartsAboveEveryStep) {
  const std::string a = Join("a").member_id();
  Join("b");
  Register({{"w", {8, 16}}});
  ASSERT_TRUE(Heartbeat(a, 30).ok());
  const gift::v1::ClusterState before = *state_->Snapshot();
  EXPECT_EQ(before.run().generation(), 0u);
  gift::v1::StartRunRequest request;
  request.set_run_id("second");
  request.set_member_id(a);
  auto started = state_->StartRun(request);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->started());
  EXPECT_EQ(started->run().generation(), 1u);
  EXPECT_GT(started->run().base_step(), before.frozen_through_step());
  EXPECT_GT(started->run().base_step(), 30u);
  ASSERT_EQ(started->dropped_tensors_size(), 1);
  EXPECT_EQ(started->dropped_tensors(0), "w");
  const gift::v1::ClusterState after = *state_->Snapshot();
  EXPECT_EQ(after.epoch(), before.epoch() + 1);
  EXPECT_EQ(after.tensors_size(), 0);
  EXPECT_EQ(after.bases_size(), 0);
  EXPECT_EQ(after.run().run_id(), "second");
  EXPECT_EQ(started->revision(), after.revision());
  // New shapes register under new ids.
  std::vector<gift::v1::TensorInfo> again = Register({{"w", {16, 8}}});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].tensor_id(), before.tensors(0).tensor_id());
  // The same run again: nothing happens.
  auto same = state_->StartRun(request);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->started());
  EXPECT_EQ(state_->Snapshot()->tensors_size(), 1);
  // Bad requests.
  request.set_run_id("");
  EXPECT_EQ(state_->StartRun(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_run_id(std::string(300, 'x'));
  EXPECT_EQ(state_->StartRun(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_run_id("third");
  request.set_member_id("m99");
  EXPECT_FALSE(state_->StartRun(request).ok());
  // Kept across a restart.
  Open();
  EXPECT_EQ(state_->Snapshot()->run().run_id(), "second");
  EXPECT_EQ(state_->Snapshot()->run().base_step(), started->run().base_step());
  EXPECT_EQ(state_->Snapshot()->tensors_size(), 1);
}

TEST_F(ClusterStateMachineTest, OwnersAreSpreadByElementCount) {
  Join("a");
  Join("b");
  // 64*64 = 4096 goes to one worker; the three 32x32 tensors (1024 each) to the other.
  Register({{"big", {64, 64}}, {"s1", {32, 32}}, {"s2", {32, 32}}, {"s3", {32, 32}}, {"v", {9}}});
  std::map<std::string, uint64_t> elements;
  std::shared_ptr<const gift::v1::ClusterState> s = state_->Snapshot();
  for (int i = 0; i < s->bases_size(); ++i) {
    if (s->tensors(i).shape_size() == 1) {
      EXPECT_EQ(s->bases(i).owner_member_id(), "");  // 1-D tensors have no basis owner
      continue;
    }
    elements[s->bases(i).owner_member_id()] += s->tensors(i).num_elements();
  }
  ASSERT_EQ(elements.size(), 2u);
  EXPECT_EQ(elements.begin()->second + std::next(elements.begin())->second, 4096u + 3 * 1024u);
  EXPECT_EQ(std::max(elements.begin()->second, std::next(elements.begin())->second), 4096u);
}

// The refresh negotiation with a late acknowledgement: the activation step is
// postponed, never committed before all acks, and never at or below the
// frozen step.
TEST_F(ClusterStateMachineTest, LateAckPostponesTheActivation) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  const std::string owner = Basis(t.tensor_id()).owner_member_id();
  const std::string other = owner == a ? b : a;
  ASSERT_TRUE(Heartbeat(a, 2).ok());
  ASSERT_TRUE(Heartbeat(b, 2).ok());
  EXPECT_EQ(state_->Snapshot()->frozen_through_step(), 10u);  // 2 + window 8

  auto published = Publish(owner, t, 1);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->tentative_activation_step(), 14u);  // frozen 10 + lead 4
  gift::v1::BasisProposal p = Basis(t.tensor_id()).proposal();
  EXPECT_EQ(p.version(), 1u);
  EXPECT_THAT(p.acked_member_ids(), ElementsAre(owner));

  // Workers progress; the other worker has not acknowledged.
  for (uint64_t step = 3; step <= 12; ++step) {
    ASSERT_TRUE(Heartbeat(a, step).ok());
    ASSERT_TRUE(Heartbeat(b, step).ok());
    std::shared_ptr<const gift::v1::ClusterState> s = state_->Snapshot();
    const gift::v1::TensorBasisState& basis = s->bases(0);
    ASSERT_TRUE(basis.has_proposal()) << "committed without every ack at step " << step;
    EXPECT_GT(basis.proposal().tentative_activation_step(), s->frozen_through_step());
    EXPECT_EQ(basis.versions_size(), 1);
  }
  p = Basis(t.tensor_id()).proposal();
  // Postponed at step 6 (frozen 14 reached 14: to 18) and step 10 (to 22).
  EXPECT_EQ(p.postponements(), 2u);
  EXPECT_EQ(p.tentative_activation_step(), 22u);

  const uint64_t frozen_before = state_->Snapshot()->frozen_through_step();
  auto ack = Ack(other, t.tensor_id(), 1);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_TRUE(ack->committed());
  EXPECT_GT(ack->activation_step(), frozen_before);
  gift::v1::TensorBasisState basis = Basis(t.tensor_id());
  EXPECT_FALSE(basis.has_proposal());
  ASSERT_EQ(basis.versions_size(), 2);
  EXPECT_EQ(basis.versions(1).version(), 1u);
  EXPECT_EQ(basis.versions(1).activation_step(), ack->activation_step());
  EXPECT_FALSE(basis.versions(1).direct());
  // A repeated acknowledgement is idempotent.
  auto again = Ack(other, t.tensor_id(), 1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->activation_step(), ack->activation_step());

  // Once every worker is past the activation step, version 0 is pruned.
  ASSERT_TRUE(Heartbeat(a, ack->activation_step()).ok());
  EXPECT_EQ(Basis(t.tensor_id()).versions_size(), 2);  // b is still before it
  ASSERT_TRUE(Heartbeat(b, ack->activation_step()).ok());
  basis = Basis(t.tensor_id());
  ASSERT_EQ(basis.versions_size(), 1);
  EXPECT_EQ(basis.versions(0).version(), 1u);
}

TEST_F(ClusterStateMachineTest, JoinerMustAckAndLeaverNoLongerCounts) {
  const std::string a = Join("a").member_id();
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  const std::string c = Join("c").member_id();  // a keeps the ownership
  ASSERT_EQ(Basis(t.tensor_id()).owner_member_id(), a);
  ASSERT_TRUE(Publish(a, t, 1).ok());
  const std::string d = Join("d").member_id();  // joins while pending: must ack too
  ASSERT_TRUE(Ack(c, t.tensor_id(), 1).ok());
  EXPECT_TRUE(Basis(t.tensor_id()).has_proposal());
  ASSERT_TRUE(Ack(d, t.tensor_id(), 1).ok());
  EXPECT_FALSE(Basis(t.tensor_id()).has_proposal());

  ASSERT_TRUE(Publish(a, t, 2).ok());
  ASSERT_TRUE(Ack(c, t.tensor_id(), 2).ok());
  EXPECT_TRUE(Basis(t.tensor_id()).has_proposal());
  ASSERT_TRUE(Leave(d).ok());  // the missing one leaves: commits
  gift::v1::TensorBasisState basis = Basis(t.tensor_id());
  EXPECT_FALSE(basis.has_proposal());
  EXPECT_EQ(basis.versions().rbegin()->version(), 2u);
}

TEST_F(ClusterStateMachineTest, NewerPublicationReplacesThePendingOne) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  const std::string owner = Basis(t.tensor_id()).owner_member_id();
  const std::string other = owner == a ? b : a;
  ASSERT_TRUE(Publish(owner, t, 1).ok());
  ASSERT_TRUE(Publish(owner, t, 3).ok());
  EXPECT_EQ(Basis(t.tensor_id()).proposal().version(), 3u);
  EXPECT_EQ(Ack(other, t.tensor_id(), 1).status().code(), absl::StatusCode::kNotFound);
  gift::v1::FetchBasisRequest fetch;
  fetch.set_member_id(other);
  fetch.set_tensor_id(t.tensor_id());
  fetch.set_version(1);
  EXPECT_EQ(state_->FetchBasis(fetch).status().code(), absl::StatusCode::kNotFound);
  fetch.set_version(3);
  auto data = state_->FetchBasis(fetch);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data->bytes, MakeBasisBytes(t.tensor_id(), 3, 8, 16));
  EXPECT_EQ(data->header.crc32c(), crc32c::Value(data->bytes->data(), data->bytes->size()));
}

TEST_F(ClusterStateMachineTest, PublishRejectsBadRequestsWithTheDocumentedCodes) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  std::vector<gift::v1::TensorInfo> ts = Register({{"w", {8, 16}}, {"x", {4, 4}}});
  const gift::v1::TensorInfo& t = ts[0];
  const std::string owner = Basis(t.tensor_id()).owner_member_id();
  const std::string other = owner == a ? b : a;

  EXPECT_EQ(Publish(other, t, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  gift::v1::TensorInfo unknown = t;
  unknown.set_tensor_id(99);
  EXPECT_EQ(Publish(owner, unknown, 1).status().code(), absl::StatusCode::kNotFound);
  // Bytes for another shape or another tensor id.
  EXPECT_EQ(Publish(owner, t, 1, MakeBasisBytes(t.tensor_id(), 1, 8, 8)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Publish(owner, t, 1, MakeBasisBytes(77, 1, 8, 16)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Publish(owner, t, 1, "definitely not a basis").status().code(),
            absl::StatusCode::kInvalidArgument);

  std::string bytes = MakeBasisBytes(t.tensor_id(), 1, 8, 16);
  gift::v1::BasisHeader header;
  header.set_member_id(owner);
  header.set_tensor_id(t.tensor_id());
  header.set_version(1);
  header.set_rank(2);
  header.set_size_bytes(bytes.size());
  header.set_crc32c(crc32c::Value(bytes.data(), bytes.size()) ^ 1);
  EXPECT_EQ(state_->PublishBasis(header, bytes).status().code(), absl::StatusCode::kDataLoss);
  header.set_size_bytes(options_.max_basis_bytes + 1);
  EXPECT_EQ(state_->CheckPublish(header).code(), absl::StatusCode::kResourceExhausted);

  ASSERT_TRUE(Publish(owner, t, 5).ok());
  absl::Status old = Publish(owner, t, 5).status();
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(), HasSubstr("not above"));
  EXPECT_EQ(Ack(other, t.tensor_id(), 4).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateMachineTest, DirectVersionSwitchesATensorBackWithoutBytes) {
  const std::string a = Join("a").member_id();
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  gift::v1::BasisHeader header;
  header.set_member_id(a);
  header.set_tensor_id(t.tensor_id());
  header.set_version(1);
  header.set_direct(true);
  auto published = state_->PublishBasis(header, "");
  ASSERT_TRUE(published.ok()) << published.status();
  gift::v1::TensorBasisState basis = Basis(t.tensor_id());
  ASSERT_EQ(basis.versions_size(), 2);  // the only worker published: committed at once
  EXPECT_TRUE(basis.versions(1).direct());
  EXPECT_EQ(basis.versions(1).activation_step(), published->tentative_activation_step());
}

TEST_F(ClusterStateMachineTest, SetRankIsANewNegotiatedVersion) {
  const std::string a = Join("a").member_id();
  std::vector<gift::v1::TensorInfo> ts =
      Register({{"layers.0.mlp", {8, 16}}, {"layers.0.attn", {8, 16}}});
  const uint64_t policy_version = state_->GetPolicy().version();
  gift::v1::SetRankRequest request;
  request.set_rank(8);
  request.set_tensor_glob("*.mlp");
  auto response = state_->SetRank(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->policy().version(), policy_version + 1);
  ASSERT_EQ(response->policy().overrides_size(), 1);
  EXPECT_EQ(response->policy().overrides(0).glob(), "*.mlp");
  EXPECT_EQ(response->policy().overrides(0).rank(), 8u);
  EXPECT_THAT(response->tensors(), ElementsAre("layers.0.mlp"));
  EXPECT_EQ(Basis(ts[0].tensor_id()).refresh_requests(), 1u);
  EXPECT_EQ(Basis(ts[1].tensor_id()).refresh_requests(), 0u);
  // Setting it again updates the same override.
  request.set_rank(4);
  ASSERT_TRUE(state_->SetRank(request).ok());
  EXPECT_EQ(state_->GetPolicy().overrides_size(), 1);
  EXPECT_EQ(state_->GetPolicy().overrides(0).rank(), 4u);
  request.set_rank(0);
  EXPECT_EQ(state_->SetRank(request).status().code(), absl::StatusCode::kInvalidArgument);
  // The owner answers the request with a new version carrying the new r.
  ASSERT_TRUE(Publish(a, ts[0], 1).ok());
  EXPECT_EQ(Basis(ts[0].tensor_id()).versions().rbegin()->rank(), 2u);

  gift::v1::RequestRefreshRequest refresh;
  auto all = state_->RequestRefresh(refresh);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->tensors_size(), 2);
  EXPECT_EQ(Basis(ts[1].tensor_id()).refresh_requests(), 1u);
}

TEST_F(ClusterStateMachineTest, PolicyIsValidatedAndVersioned) {
  const gift::v1::Policy initial = state_->GetPolicy();
  EXPECT_EQ(initial.version(), 1u);
  EXPECT_EQ(initial.transform().rank(), 64u);
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_refresh()->set_period_steps(25);
  request.set_expected_version(7);
  EXPECT_EQ(state_->SetPolicy(request).status().code(), absl::StatusCode::kAborted);
  request.set_expected_version(1);
  auto set = state_->SetPolicy(request);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->version(), 2u);
  EXPECT_EQ(set->refresh().period_steps(), 25u);
  EXPECT_EQ(set->transform().rank(), 64u);  // defaults filled in
  request.mutable_policy()->mutable_transform()->set_ema_decay(2);
  request.set_expected_version(0);
  absl::Status bad = state_->SetPolicy(request).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("transform.ema_decay = 2"));
  EXPECT_EQ(state_->GetPolicy().version(), 2u);
}

TEST_F(ClusterStateMachineTest, TheNodeOfAJoinIsKeptAndAHierarchySwitchStartsAnEpoch) {
  gift::v1::JoinRequest join;
  join.set_name("w");
  join.set_role(gift::v1::MEMBER_ROLE_WORKER);
  join.set_node("host-7");
  ASSERT_TRUE(state_->Join(join).ok());
  ASSERT_EQ(state_->Snapshot()->workers_size(), 1);
  EXPECT_EQ(state_->Snapshot()->workers(0).node(), "host-7");
  const uint64_t epoch = state_->Snapshot()->epoch();
  gift::v1::SetPolicyRequest request;
  request.mutable_policy()->mutable_refresh()->set_period_steps(25);
  ASSERT_TRUE(state_->SetPolicy(request).ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);  // no routing change
  request.mutable_policy()->set_hierarchy(gift::v1::HIERARCHY_NODE);
  ASSERT_TRUE(state_->SetPolicy(request).ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);
  EXPECT_EQ(state_->Snapshot()->shard_map().epoch(), epoch + 1);
  ASSERT_TRUE(state_->SetPolicy(request).ok());  // unchanged: the same epoch
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);
}

TEST_F(ClusterStateMachineTest, DrainKeepsTheEpochUntilTheMemberLeaves) {
  const std::string a = Join("a").member_id();
  Join("b");
  const uint64_t epoch = state_->Snapshot()->epoch();
  gift::v1::DrainRequest request;
  request.set_name("a");
  auto drained = state_->Drain(request);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(drained->member().state(), gift::v1::MEMBER_STATE_DRAINING);
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);
  gift::v1::HeartbeatRequest hb;
  hb.set_member_id(a);
  hb.set_epoch(epoch);
  auto response = state_->Heartbeat(hb);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->state(), gift::v1::MEMBER_STATE_DRAINING);
  ASSERT_TRUE(Leave(a).ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);
  request.set_name("nobody");
  EXPECT_EQ(state_->Drain(request).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateMachineTest, StatusNamesTheSlowestWorkers) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  ASSERT_TRUE(Heartbeat(a, 7).ok());
  ASSERT_TRUE(Heartbeat(b, 5).ok());
  auto status = state_->GetStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->slowest_step(), 6u);
  EXPECT_THAT(status->slowest_member_ids(), ElementsAre(b));
  EXPECT_EQ(status->now_unix_ms(), absl::ToUnixMillis(clock_.Now()));
}

TEST_F(ClusterStateMachineTest, OwnersErrorRatiosAreKeptWithoutANewRevision) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  const gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  const std::string owner = state_->Snapshot()->bases(0).owner_member_id();
  const std::string other = owner == a ? b : a;
  const uint64_t revision = state_->revision();
  auto report = [&](const std::string& member, double ratio) {
    gift::v1::HeartbeatRequest hb;
    hb.set_member_id(member);
    hb.set_epoch(state_->Snapshot()->epoch());
    gift::v1::TensorErrorRatio* r = hb.add_error_ratios();
    r->set_tensor_id(t.tensor_id());
    r->set_ratio(ratio);
    r->set_step(4);
    r->set_reference(0.5);
    return state_->Heartbeat(hb).status();
  };
  ASSERT_TRUE(report(other, 0.9).ok());  // not the owner's: ignored
  auto status = state_->GetStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->state().bases(0).has_error_ratio());
  ASSERT_TRUE(report(owner, 0.55).ok());
  status = state_->GetStatus();
  ASSERT_TRUE(status.ok());
  ASSERT_TRUE(status->state().bases(0).has_error_ratio());
  EXPECT_EQ(status->state().bases(0).error_ratio().ratio(), 0.55);
  EXPECT_EQ(status->state().bases(0).error_ratio().reference(), 0.5);
  EXPECT_EQ(status->state().bases(0).error_ratio().step(), 4u);
  EXPECT_EQ(state_->revision(), revision);  // watchers are not woken for it
}

TEST_F(ClusterStateMachineTest, RestartResumesEverything) {
  const std::string a = Join("a").member_id();
  Join("s", gift::v1::MEMBER_ROLE_SERVER);
  gift::v1::TensorInfo t = Register({{"w", {8, 16}}})[0];
  ASSERT_TRUE(Publish(a, t, 1).ok());  // a is the only worker: committed
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_transform()->set_rank(12);
  ASSERT_TRUE(state_->SetPolicy(set).ok());
  std::shared_ptr<const gift::v1::ClusterState> before = state_->Snapshot();

  Open();
  std::shared_ptr<const gift::v1::ClusterState> after = state_->Snapshot();
  EXPECT_EQ(after->cluster_id(), before->cluster_id());
  EXPECT_EQ(after->epoch(), before->epoch());
  EXPECT_GT(after->revision(), before->revision());
  EXPECT_EQ(after->policy().SerializeAsString(), before->policy().SerializeAsString());
  EXPECT_EQ(after->tensors(0).SerializeAsString(), before->tensors(0).SerializeAsString());
  EXPECT_EQ(after->bases(0).SerializeAsString(), before->bases(0).SerializeAsString());
  EXPECT_EQ(after->shard_map().SerializeAsString(), before->shard_map().SerializeAsString());
  EXPECT_EQ(after->workers_size(), 1);
  gift::v1::FetchBasisRequest fetch;
  fetch.set_member_id(a);
  fetch.set_tensor_id(t.tensor_id());
  fetch.set_version(1);
  auto data = state_->FetchBasis(fetch);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data->bytes, MakeBasisBytes(t.tensor_id(), 1, 8, 16));

  // Members from the file got one grace TTL: a renews, the server does not.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(a, 0).ok());
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(state_->ExpireLeases().ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), before->epoch() + 1);
  EXPECT_EQ(state_->Snapshot()->servers_size(), 0);
  // A new member id never repeats an old one.
  EXPECT_NE(Join("s").member_id(), before->servers(0).member_id());
}

TEST_F(ClusterStateMachineTest, ChangeCallbackRunsOncePerNewRevision) {
  int calls = 0;
  state_->SetChangeCallback([&] { ++calls; });
  Join("a");
  EXPECT_EQ(calls, 1);
  gift::v1::JoinRequest dup;
  dup.set_name("a");
  dup.set_role(gift::v1::MEMBER_ROLE_WORKER);
  EXPECT_FALSE(state_->Join(dup).ok());
  EXPECT_EQ(calls, 1);  // a failed call changes nothing
}

// ClusterState.dataplane_mac (docs/design.md section 8.2): the preferred
// MAC when every worker and server lists it; an empty list (a build before
// negotiation) or one without it gives AES-256-GMAC, which every build has.
TEST(NegotiatedMacTest, ThePreferredMacOnlyWhenEveryMemberListsIt) {
  constexpr auto kGmac = gift::v1::MAC_ALGORITHM_AES_256_GMAC;
  constexpr auto kChaCha = gift::v1::MAC_ALGORITHM_CHACHA20_POLY1305;
  gift::v1::ClusterState state;
  EXPECT_EQ(NegotiatedMac(kChaCha, state), kChaCha);  // no members yet
  gift::v1::Member* w = state.add_workers();
  w->add_dataplane_macs(kGmac);
  w->add_dataplane_macs(kChaCha);
  gift::v1::Member* s = state.add_servers();
  s->add_dataplane_macs(kChaCha);
  EXPECT_EQ(NegotiatedMac(kChaCha, state), kChaCha);
  EXPECT_EQ(NegotiatedMac(kGmac, state), kGmac);
  s->clear_dataplane_macs();  // a server of a build before negotiation
  EXPECT_EQ(NegotiatedMac(kChaCha, state), kGmac);
  EXPECT_EQ(NegotiatedMac(kGmac, state), kGmac);
  s->add_dataplane_macs(kGmac);  // lists GMAC only
  EXPECT_EQ(NegotiatedMac(kChaCha, state), kGmac);
}

}  // namespace
}  // namespace gift::coordinator
