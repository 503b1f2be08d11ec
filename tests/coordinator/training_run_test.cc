// A registration without a run id starts a new run by itself once every
// training client of the current run has left (Member.client,
// RegisterTensorsRequest.new_run_when_clients_left); a live run is joined.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/coordinator/cluster_state_fixture.h"

namespace gift::coordinator::testing {
namespace {

class TrainingRunTest : public ClusterStateMachineTest {
 protected:
  // A worker's registration of "w" as its training client's number
  // `registration`, asking for a new run when the run's clients have left.
  absl::StatusOr<gift::v1::RegisterTensorsResponse> ClientRegisters(
      const std::string& member, uint64_t registration, std::vector<int64_t> shape = {8, 16}) {
    gift::v1::RegisterTensorsRequest request = MakeRegisterRequest({{"w", std::move(shape)}});
    request.set_member_id(member);
    request.set_client_registration(registration);
    request.set_new_run_when_clients_left(true);
    return state_->RegisterTensors(request);
  }

  absl::Status ReportClient(const std::string& member, uint64_t registration,
                            uint64_t generation, bool connected) {
    gift::v1::HeartbeatRequest request;
    request.set_member_id(member);
    request.set_epoch(state_->Snapshot()->epoch());
    request.mutable_client()->set_registration(registration);
    request.mutable_client()->set_run_generation(generation);
    request.mutable_client()->set_connected(connected);
    return state_->Heartbeat(request).status();
  }

  gift::v1::TrainingClient ClientOf(const std::string& member) {
    for (const gift::v1::Member& w : state_->Snapshot()->workers()) {
      if (w.member_id() == member) return w.client();
    }
    ADD_FAILURE() << "no worker " << member;
    return {};
  }
};

TEST_F(TrainingRunTest, ANewRunStartsOnlyOnceEveryClientOfTheRunHasLeft) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  // The first clients: the run has none yet, so they join it.
  auto first = ClientRegisters(a, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->run_started());
  EXPECT_EQ(first->run().generation(), 0u);
  ASSERT_TRUE(ClientRegisters(b, 1).ok());
  EXPECT_EQ(ClientOf(a).registration(), 1u);
  EXPECT_TRUE(ClientOf(a).connected());
  ASSERT_TRUE(Heartbeat(a, 5).ok());
  ASSERT_TRUE(Heartbeat(b, 5).ok());

  // a's client leaves; b's is live: a client started again joins the run.
  ASSERT_TRUE(ReportClient(a, 1, 0, false).ok());
  EXPECT_FALSE(ClientOf(a).connected());
  auto stray = ClientRegisters(a, 2);
  ASSERT_TRUE(stray.ok()) << stray.status();
  EXPECT_FALSE(stray->run_started());
  EXPECT_EQ(stray->run().generation(), 0u);
  EXPECT_TRUE(ClientOf(a).connected());

  // Stale reports change nothing: an older registration, or "connected" for
  // a registration already reported gone.
  ASSERT_TRUE(ReportClient(a, 1, 0, false).ok());
  EXPECT_TRUE(ClientOf(a).connected());
  ASSERT_TRUE(ReportClient(b, 1, 0, false).ok());
  ASSERT_TRUE(ReportClient(b, 1, 0, true).ok());
  EXPECT_FALSE(ClientOf(b).connected());

  // Every client gone: the next registration starts a new run (an id of the
  // coordinator's), above every step, with the tensors dropped, so other
  // shapes register.
  ASSERT_TRUE(ReportClient(a, 2, 0, false).ok());
  const gift::v1::ClusterState before = *state_->Snapshot();
  auto again = ClientRegisters(b, 2, {16, 8});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->run_started());
  EXPECT_EQ(again->run().generation(), 1u);
  EXPECT_EQ(again->run().run_id(), "auto-1");
  EXPECT_GT(again->run().base_step(), 5u);
  ASSERT_EQ(again->tensors_size(), 1);
  EXPECT_NE(again->tensors(0).tensor_id(), before.tensors(0).tensor_id());
  const gift::v1::ClusterState after = *state_->Snapshot();
  EXPECT_EQ(after.epoch(), before.epoch() + 1);
  EXPECT_EQ(after.run().run_id(), "auto-1");
  EXPECT_EQ(again->revision(), after.revision());
  EXPECT_EQ(ClientOf(b).run_generation(), 1u);

  // The other rank of the new run joins it (b's client is connected in it),
  // with a's old client still reported gone.
  auto joined = ClientRegisters(a, 3, {16, 8});
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_FALSE(joined->run_started());
  EXPECT_EQ(joined->run().generation(), 1u);
  EXPECT_EQ(joined->tensors(0).tensor_id(), again->tensors(0).tensor_id());
  // A late beat of a's last run changes nothing.
  ASSERT_TRUE(ReportClient(a, 2, 0, false).ok());
  EXPECT_EQ(ClientOf(a).registration(), 3u);
  EXPECT_TRUE(ClientOf(a).connected());
}

TEST_F(TrainingRunTest, WithoutTheFlagOrWithoutClientsTheRunIsJoined) {
  const std::string a = Join("a").member_id();
  ASSERT_TRUE(ClientRegisters(a, 1).ok());
  ASSERT_TRUE(ReportClient(a, 1, 0, false).ok());
  // Not a client's registration asking for a new run (a run id was given,
  // or another caller): joins.
  gift::v1::RegisterTensorsRequest plain = MakeRegisterRequest({{"w", {8, 16}}});
  plain.set_member_id(a);
  auto joined = state_->RegisterTensors(plain);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_FALSE(joined->run_started());
  EXPECT_FALSE(ClientOf(a).connected());

  // After `giftctl run reset` the new run has no clients: joined, not
  // started again.
  gift::v1::StartRunRequest reset;
  reset.set_run_id("by-hand");
  ASSERT_TRUE(state_->StartRun(reset).ok());
  auto first = ClientRegisters(a, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->run_started());
  EXPECT_EQ(state_->Snapshot()->run().run_id(), "by-hand");
}

// A registration that would start a run but is refused (a bad shape) leaves
// the run as it was: applied whole or not at all.
TEST_F(TrainingRunTest, ARefusedRegistrationStartsNoRun) {
  const std::string a = Join("a").member_id();
  ASSERT_TRUE(ClientRegisters(a, 1).ok());
  ASSERT_TRUE(ReportClient(a, 1, 0, false).ok());
  const gift::v1::ClusterState before = *state_->Snapshot();
  EXPECT_FALSE(ClientRegisters(a, 2, {0, 16}).ok());
  const gift::v1::ClusterState after = *state_->Snapshot();
  EXPECT_EQ(after.run().generation(), before.run().generation());
  EXPECT_EQ(after.tensors_size(), 1);
  EXPECT_EQ(after.epoch(), before.epoch());
}

// Member.client is kept across a coordinator restart (and a beat brings it
// back to one that lost it).
TEST_F(TrainingRunTest, TheClientSurvivesARestart) {
  const std::string a = Join("a").member_id();
  ASSERT_TRUE(ClientRegisters(a, 1).ok());
  ASSERT_TRUE(ReportClient(a, 1, 0, false).ok());
  Open();
  EXPECT_EQ(ClientOf(a).registration(), 1u);
  EXPECT_FALSE(ClientOf(a).connected());
  auto started = ClientRegisters(a, 2);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->run_started());
}

}  // namespace
}  // namespace gift::coordinator::testing
