// MembershipGuard (worker/daemon/membership_guard.h) on hand-made cluster states,
// and the texts that name waiting or lost workers (step_wait_reporter.h).
#include "worker/daemon/membership_guard.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/daemon/step_wait_reporter.h"

namespace gift::worker {
namespace {

gift::v1::Member Worker(const std::string& id, const std::string& name, uint32_t rank) {
  gift::v1::Member m;
  m.set_member_id(id);
  m.set_name(name);
  m.set_rank(rank);
  m.set_role(gift::v1::MEMBER_ROLE_WORKER);
  m.set_node(absl::StrCat("node-", name));
  return m;
}

std::shared_ptr<const gift::v1::ClusterState> State(uint64_t epoch,
                                                    std::vector<gift::v1::Member> workers,
                                                    gift::v1::OnMemberLoss on_loss) {
  auto s = std::make_shared<gift::v1::ClusterState>();
  s->set_epoch(epoch);
  s->set_revision(epoch * 10);
  for (gift::v1::Member& w : workers) *s->add_workers() = std::move(w);
  s->mutable_policy()->set_on_member_loss(on_loss);
  return s;
}

TEST(MembershipGuardTest, ContinueReportsTheLostWorkersOnceInTheNextResult) {
  MembershipGuard guard;
  const auto two = State(3, {Worker("m1", "a", 0), Worker("m2", "b", 1)},
                         gift::v1::ON_MEMBER_LOSS_CONTINUE);
  const auto one = State(4, {Worker("m1", "a", 0)}, gift::v1::ON_MEMBER_LOSS_CONTINUE);
  guard.Observe(two);
  gift::v1::PushPullResponse r1;
  guard.Completed(3, "m1", &r1);
  EXPECT_EQ(r1.previous_world_size(), 0u);  // the first step: nothing before it
  guard.Observe(one);
  EXPECT_TRUE(guard.Check(*one, 5, "m1").ok());  // continue: the step runs
  gift::v1::PushPullResponse r2;
  r2.set_step(5);
  guard.Completed(4, "m1", &r2);
  EXPECT_EQ(r2.previous_world_size(), 2u);
  ASSERT_EQ(r2.lost_members_size(), 1);
  EXPECT_EQ(r2.lost_members(0).name(), "b");
  EXPECT_EQ(r2.lost_members(0).rank(), 1u);
  EXPECT_EQ(r2.lost_members(0).node(), "node-b");
  gift::v1::PushPullResponse r3;
  guard.Completed(4, "m1", &r3);  // the same world again: nothing to say
  EXPECT_EQ(r3.previous_world_size(), 0u);
  // A worker that joins: a larger world, nobody lost.
  guard.Observe(State(5, {Worker("m1", "a", 0), Worker("m3", "c", 1)},
                      gift::v1::ON_MEMBER_LOSS_CONTINUE));
  gift::v1::PushPullResponse r4;
  guard.Completed(5, "m1", &r4);
  EXPECT_EQ(r4.previous_world_size(), 1u);
  EXPECT_EQ(r4.lost_members_size(), 0);
}

TEST(MembershipGuardTest, FailRefusesEveryStepAfterALossUntilReset) {
  MembershipGuard guard;
  const auto two =
      State(3, {Worker("m1", "a", 0), Worker("m2", "b", 1)}, gift::v1::ON_MEMBER_LOSS_FAIL);
  guard.Observe(two);
  gift::v1::PushPullResponse r;
  guard.Completed(3, "m1", &r);
  // b lost its lease and joined again as m4: still a loss for a's job.
  const auto rejoined =
      State(5, {Worker("m1", "a", 0), Worker("m4", "b", 1)}, gift::v1::ON_MEMBER_LOSS_FAIL);
  for (uint64_t step : {7u, 8u}) {
    absl::Status s = guard.Check(*rejoined, step, "m1");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "on_member_loss=fail")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 (b, m2 on node-b)")) << s;
  }
  // Its own re-join is not a loss (the same name).
  const auto self_rejoined =
      State(6, {Worker("m5", "a", 0), Worker("m2", "b", 1)}, gift::v1::ON_MEMBER_LOSS_FAIL);
  EXPECT_TRUE(guard.Check(*self_rejoined, 9, "m5").ok());
  guard.Reset();  // the training processes registered again
  EXPECT_TRUE(guard.Check(*rejoined, 9, "m1").ok());
}

TEST(MembershipGuardTest, ARefusedRegistrationFailsTheOthersStepsWhateverThePolicy) {
  MembershipGuard guard;
  gift::v1::Member b = Worker("m2", "b", 1);
  b.set_registration_error("ALREADY_EXISTS: tensor 'w' is registered with shape [8, 16]");
  const auto state =
      State(3, {Worker("m1", "a", 0), b}, gift::v1::ON_MEMBER_LOSS_CONTINUE);
  absl::Status s = guard.Check(*state, 1, "m1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 (b, m2 on node-b)")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shape [8, 16]")) << s;
  EXPECT_TRUE(guard.Check(*state, 1, "m2").ok());  // its own refusal is its client's error
}

TEST(StepWaitTextTest, NamesTheMissingRanksOrTheServers) {
  gift::v1::StepWait wait;
  wait.set_step(12);
  EXPECT_EQ(DescribeStepWait(wait), "every rank began step 12 (the servers' results are missing)");
  gift::v1::Member* m = wait.add_missing();
  *m = Worker("m4", "worker-1", 1);
  m->set_last_step(11);
  EXPECT_EQ(DescribeStepWait(wait),
            "waiting for rank 1 (worker-1, m4 on node-worker-1, last step 11) that has not "
            "begun step 12");
  EXPECT_EQ(DescribeWorkers({Worker("m4", "worker-1", 1), Worker("m5", "worker-2", 2)}),
            "rank 1 (worker-1, m4 on node-worker-1), rank 2 (worker-2, m5 on node-worker-2)");
}

}  // namespace
}  // namespace gift::worker
