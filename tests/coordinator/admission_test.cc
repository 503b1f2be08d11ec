// Admission of workers that join a cluster that has stepped (cluster_state.h,
// "Admission"): the admit step the coordinator names, the wait outside the
// world, the horizon held below the admit step, the one epoch bump that lets
// the joiner in, and the cases that admit at once. Over the cluster state
// fixture (real SQLite file, fake clock).
#include <string>

#include "gmock/gmock.h"
#include "tests/coordinator/cluster_state_fixture.h"

namespace gift::coordinator::testing {
namespace {

namespace v1 = ::gift::v1;
using ::testing::HasSubstr;

bool IsWorkerOf(const v1::ClusterState& s, const std::string& id) {
  for (const v1::Member& w : s.workers()) {
    if (w.member_id() == id) return true;
  }
  return false;
}

class AdmissionTest : public ClusterStateMachineTest {
 protected:
  // Two workers and a server that have run through `step`.
  void StartCluster(uint64_t step) {
    w0_ = Join("w0").member_id();
    w1_ = Join("w1").member_id();
    s0_ = Join("s0", v1::MEMBER_ROLE_SERVER).member_id();
    ASSERT_TRUE(Heartbeat(w0_, step).ok());
    ASSERT_TRUE(Heartbeat(w1_, step).ok());
  }

  std::string w0_, w1_, s0_;
};

TEST_F(AdmissionTest, WorkersOfAClusterThatHasNotSteppedJoinAtOnce) {
  const v1::JoinResponse a = Join("w0");
  const v1::JoinResponse b = Join("w1");
  for (const v1::JoinResponse& r : {a, b}) {
    EXPECT_TRUE(r.admitted());
    EXPECT_EQ(r.admit_step(), 0u);
  }
  EXPECT_EQ(state_->Snapshot()->workers_size(), 2);
  EXPECT_EQ(b.rank(), 1u);
}

TEST_F(AdmissionTest, ALateWorkerIsAdmittedAboveTheHorizonOnceTheOthersReachIt) {
  StartCluster(20);
  const auto before = state_->Snapshot();
  ASSERT_EQ(before->frozen_through_step(), 28u);  // 20 + window 8
  const uint64_t epoch = before->epoch();

  const v1::JoinResponse late = Join("w2");
  EXPECT_FALSE(late.admitted());
  EXPECT_EQ(late.admit_step(), 29u);
  // Not in the world yet, no new epoch: the others' steps are undisturbed.
  auto waiting = state_->Snapshot();
  EXPECT_EQ(waiting->epoch(), epoch);
  EXPECT_EQ(waiting->workers_size(), 2);
  EXPECT_FALSE(IsWorkerOf(*waiting, late.member_id()));
  // It holds a lease and its heartbeats count for nothing else.
  EXPECT_TRUE(Heartbeat(late.member_id(), 5).ok());

  // The horizon does not reach the admit step while it waits.
  ASSERT_TRUE(Heartbeat(w0_, 27).ok());
  EXPECT_EQ(state_->Snapshot()->frozen_through_step(), 28u);
  ASSERT_TRUE(Heartbeat(w1_, 27).ok());
  EXPECT_FALSE(IsWorkerOf(*state_->Snapshot(), late.member_id()));

  // Both have completed step 28: one epoch bump admits it, at step 28 done.
  ASSERT_TRUE(Heartbeat(w0_, 28).ok());
  EXPECT_FALSE(IsWorkerOf(*state_->Snapshot(), late.member_id()));
  ASSERT_TRUE(Heartbeat(w1_, 28).ok());
  const auto admitted = state_->Snapshot();
  EXPECT_EQ(admitted->epoch(), epoch + 1);
  ASSERT_EQ(admitted->workers_size(), 3);
  const v1::Member& joined = admitted->workers(2);
  EXPECT_EQ(joined.member_id(), late.member_id());
  EXPECT_EQ(joined.rank(), 2u);
  EXPECT_EQ(joined.admit_step(), 29u);
  EXPECT_EQ(joined.last_step(), 28u);
  // The horizon moves past the admit step.
  EXPECT_EQ(admitted->frozen_through_step(), 36u);
}

TEST_F(AdmissionTest, AnExpiredWorkerJoiningAgainWaitsForItsAdmitStep) {
  StartCluster(10);
  // w1 stops past its lease while w0 heartbeats: w1 is evicted.
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(Heartbeat(w0_, 12).ok());
  ASSERT_TRUE(Heartbeat(s0_, 0).ok());
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(state_->ExpireLeases().ok());
  ASSERT_EQ(state_->Snapshot()->workers_size(), 1);
  ASSERT_TRUE(Heartbeat(w0_, 30).ok());
  const absl::Status gone = Heartbeat(w1_, 10);
  EXPECT_TRUE(absl::IsFailedPrecondition(gone)) << gone;
  EXPECT_THAT(gone.message(), HasSubstr("evicted at step 10"));
  EXPECT_THAT(gone.message(), HasSubstr("cluster at step 30"));

  const uint64_t epoch = state_->Snapshot()->epoch();
  const v1::JoinResponse back = Join("w1");
  EXPECT_FALSE(back.admitted());
  EXPECT_EQ(back.admit_step(), 39u);  // 30 + 8 + 1
  EXPECT_NE(back.member_id(), w1_);
  // Its name is taken while it waits.
  v1::JoinRequest twin;
  twin.set_name("w1");
  twin.set_role(v1::MEMBER_ROLE_WORKER);
  EXPECT_TRUE(absl::IsAlreadyExists(state_->Join(twin).status()));
  ASSERT_TRUE(Heartbeat(w0_, 38).ok());
  const auto s = state_->Snapshot();
  EXPECT_EQ(s->epoch(), epoch + 1);
  EXPECT_TRUE(IsWorkerOf(*s, back.member_id()));
}

TEST_F(AdmissionTest, AJoiningWorkerThatExpiresOrLeavesChangesNoEpoch) {
  StartCluster(20);
  const uint64_t epoch = state_->Snapshot()->epoch();
  const v1::JoinResponse a = Join("w2");
  const v1::JoinResponse b = Join("w3");
  ASSERT_FALSE(a.admitted());
  ASSERT_TRUE(Leave(a.member_id()).ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);
  // w3 stops heartbeating while the others keep theirs.
  clock_.Advance(absl::Seconds(6));
  for (const std::string& id : {w0_, w1_, s0_}) ASSERT_TRUE(Heartbeat(id, 20).ok());
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(state_->ExpireLeases().ok());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);
  EXPECT_TRUE(absl::IsFailedPrecondition(Heartbeat(b.member_id(), 0)));
  // With nobody waiting, the horizon is free again.
  ASSERT_TRUE(Heartbeat(w0_, 40).ok());
  EXPECT_EQ(state_->Snapshot()->frozen_through_step(), 48u);
}

TEST_F(AdmissionTest, ASlowWorkerThatLeavesLetsTheJoinerIn) {
  StartCluster(20);
  const v1::JoinResponse late = Join("w2");
  ASSERT_TRUE(Heartbeat(w0_, 28).ok());
  EXPECT_FALSE(IsWorkerOf(*state_->Snapshot(), late.member_id()));
  // w1 never reaches step 28; its leave admits the joiner in the same epoch.
  const uint64_t epoch = state_->Snapshot()->epoch();
  ASSERT_TRUE(Leave(w1_).ok());
  const auto s = state_->Snapshot();
  EXPECT_EQ(s->epoch(), epoch + 2);  // the leave and the admission
  ASSERT_EQ(s->workers_size(), 2);
  EXPECT_TRUE(IsWorkerOf(*s, late.member_id()));
}

TEST_F(AdmissionTest, TheWorkersOfANewJobOnAnOldStateJoinAtOnce) {
  // The old job's workers leave; the horizon stays where they left it.
  StartCluster(20);
  ASSERT_TRUE(Leave(w0_).ok());
  ASSERT_TRUE(Leave(w1_).ok());
  ASSERT_EQ(state_->Snapshot()->frozen_through_step(), 28u);
  // A new job's workers start at step 0 and wait for each other: none of
  // them waits for an admit step.
  const v1::JoinResponse a = Join("n0");
  const v1::JoinResponse b = Join("n1");
  for (const v1::JoinResponse& r : {a, b}) {
    EXPECT_TRUE(r.admitted());
    EXPECT_EQ(r.admit_step(), 0u);
  }
  EXPECT_EQ(state_->Snapshot()->workers_size(), 2);
}

TEST_F(AdmissionTest, AWorkerReplacedBeforeTheOthersFirstBeatWaitsForItsAdmitStep) {
  // Only w0's beat has told of a completed step when w0 is evicted: the
  // others' first beats come a quarter of the lease after their joins. The
  // job has stepped all the same; a replacement joining now must not enter
  // the world at once (its start barrier would wait for a world that is
  // never complete while another joiner waits for its admit step).
  const std::string w0 = Join("w0").member_id();
  const std::string w1 = Join("w1").member_id();
  const std::string w2 = Join("w2").member_id();
  ASSERT_TRUE(Heartbeat(w0, 14).ok());
  ASSERT_TRUE(Leave(w0).ok());
  const v1::JoinResponse back = Join("w0");
  EXPECT_FALSE(back.admitted());
  EXPECT_GT(back.admit_step(), 14u);
  EXPECT_FALSE(IsWorkerOf(*state_->Snapshot(), back.member_id()));
  // Once no worker is left, member or joining, the next one starts a new job.
  for (const std::string& id : {w1, w2, back.member_id()}) ASSERT_TRUE(Leave(id).ok());
  EXPECT_TRUE(Join("n0").admitted());
}

TEST_F(AdmissionTest, ServersJoinAtOnce) {
  StartCluster(20);
  const uint64_t epoch = state_->Snapshot()->epoch();
  const v1::JoinResponse r = Join("s1", v1::MEMBER_ROLE_SERVER);
  EXPECT_TRUE(r.admitted());
  EXPECT_EQ(r.admit_step(), 0u);
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);
}

TEST_F(AdmissionTest, ACoordinatorRestartForgetsAJoiningWorker) {
  StartCluster(20);
  const v1::JoinResponse late = Join("w2");
  Open();
  const absl::Status s = Heartbeat(late.member_id(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("join again"));
  // It joins again, with the stored horizon.
  EXPECT_EQ(Join("w2").admit_step(), 29u);
}

}  // namespace
}  // namespace gift::coordinator::testing
