// GetStatus's view of the oldest incomplete step (what giftctl status and the
// gift_coordinator_oldest_incomplete_step_wait_seconds gauge show): which
// ranks it waits for, and since when, on a fake clock.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/coordinator/cluster_state.h"
#include "server/coordinator/state_store.h"
#include "tests/coordinator/test_util.h"
#include "tests/testing/temp_dir.h"

namespace gift::coordinator {
namespace {

class SlowestStepTest : public ::testing::Test {
 protected:
  SlowestStepTest() {
    auto store = StateStore::Open(dir_.File("state.db"));
    EXPECT_TRUE(store.ok()) << store.status();
    ClusterOptions options;
    options.lease_ttl = absl::Hours(1);  // the fake clock moves; leases stay
    auto state = ClusterStateMachine::Create(options, *std::move(store), &clock_);
    EXPECT_TRUE(state.ok()) << state.status();
    state_ = *std::move(state);
  }

  std::string Join(const std::string& name) {
    gift::v1::JoinRequest request;
    request.set_name(name);
    request.set_role(gift::v1::MEMBER_ROLE_WORKER);
    auto response = state_->Join(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response->member_id();
  }

  void Report(const std::string& id, uint64_t step) {
    gift::v1::HeartbeatRequest request;
    request.set_member_id(id);
    request.set_last_step(step);
    request.set_epoch(state_->Snapshot()->epoch());
    ASSERT_TRUE(state_->Heartbeat(request).ok());
  }

  gift::v1::StatusResponse Status() {
    auto status = state_->GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return *status;
  }

  gift::TempDir dir_ = test::NewTempDir("gift-coord");
  testing::FakeClock clock_;
  std::unique_ptr<ClusterStateMachine> state_;
};

TEST_F(SlowestStepTest, WaitCountsFromTheFirstReportPastTheSlowestStep) {
  const std::string a = Join("a"), b = Join("b"), c = Join("c");
  clock_.Advance(absl::Seconds(100));
  Report(a, 1);
  Report(b, 1);
  Report(c, 1);
  gift::v1::StatusResponse s = Status();
  EXPECT_EQ(s.slowest_step(), 2u);
  EXPECT_EQ(s.max_step(), 1u);
  EXPECT_EQ(s.slowest_wait_ms(), 0);  // nobody is ahead

  clock_.Advance(absl::Seconds(1));
  Report(a, 2);  // step 2 done at a: from now on it waits for b and c
  clock_.Advance(absl::Seconds(2));
  Report(b, 2);
  Report(a, 3);
  clock_.Advance(absl::Milliseconds(500));
  s = Status();
  EXPECT_EQ(s.slowest_step(), 2u);
  EXPECT_EQ(s.max_step(), 3u);
  ASSERT_EQ(s.slowest_ranks_size(), 1);
  EXPECT_EQ(s.slowest_member_ids(0), c);
  EXPECT_EQ(s.slowest_wait_ms(), 2500);

  Report(c, 2);  // now step 3 is the oldest: a reported it 500 ms ago
  s = Status();
  EXPECT_EQ(s.slowest_step(), 3u);
  EXPECT_EQ(s.slowest_ranks_size(), 2);
  EXPECT_EQ(s.slowest_wait_ms(), 500);
}

// A step one worker has begun (HeartbeatRequest.waiting_step) and another
// has not: the waiting worker's heartbeat answer names the missing one, and
// GetStatus shows it held up (not every rank at the same last step).
TEST_F(SlowestStepTest, ABegunStepWaitsForTheRanksThatHaveNotBegunIt) {
  const std::string a = Join("a"), b = Join("b"), c = Join("c");
  Report(a, 11);
  Report(b, 11);
  Report(c, 11);
  clock_.Advance(absl::Seconds(1));
  auto begin = [&](const std::string& id, uint64_t step) {
    gift::v1::HeartbeatRequest request;
    request.set_member_id(id);
    request.set_last_step(11);
    request.set_waiting_step(step);
    request.set_epoch(state_->Snapshot()->epoch());
    auto response = state_->Heartbeat(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(gift::v1::HeartbeatResponse()).step_wait();
  };
  gift::v1::StepWait wait = begin(a, 12);
  EXPECT_EQ(wait.step(), 12u);
  ASSERT_EQ(wait.missing_size(), 2);
  EXPECT_EQ(wait.missing(0).name(), "b");
  EXPECT_EQ(wait.missing(1).name(), "c");
  EXPECT_EQ(wait.missing(0).last_step(), 11u);
  clock_.Advance(absl::Seconds(2));
  begin(b, 12);
  clock_.Advance(absl::Seconds(3));
  wait = begin(a, 12);
  ASSERT_EQ(wait.missing_size(), 1);
  EXPECT_EQ(wait.missing(0).member_id(), c);
  EXPECT_EQ(wait.waited_ms(), 5000);  // since a began it

  gift::v1::StatusResponse s = Status();
  EXPECT_EQ(s.slowest_step(), 12u);
  EXPECT_EQ(s.max_step(), 11u);
  EXPECT_EQ(s.max_begun_step(), 12u);
  ASSERT_EQ(s.slowest_member_ids_size(), 1);  // a and b wait with each other
  EXPECT_EQ(s.slowest_member_ids(0), c);
  EXPECT_EQ(s.slowest_wait_ms(), 5000);

  // c begins it too: nobody is missing; the step waits for the servers.
  begin(c, 12);
  wait = begin(a, 12);
  EXPECT_EQ(wait.missing_size(), 0);
  s = Status();
  EXPECT_EQ(s.slowest_member_ids_size(), 0);
  EXPECT_EQ(s.slowest_wait_ms(), 5000);
  // Done: a reports 12 completed without waiting (waiting_step 0).
  Report(a, 12);
  Report(b, 12);
  Report(c, 12);
  s = Status();
  EXPECT_EQ(s.slowest_step(), 13u);
  EXPECT_EQ(s.max_begun_step(), 12u);
  EXPECT_EQ(s.slowest_wait_ms(), 0);
}

TEST_F(SlowestStepTest, WaitStartsAtMostAtTheEpoch) {
  const std::string a = Join("a"), b = Join("b"), c = Join("c");
  Report(a, 5);
  Report(b, 4);
  Report(c, 5);
  clock_.Advance(absl::Seconds(10));
  // A new epoch (c leaves): b has held step 5 up for 10 s, but only since
  // the epoch began in the new one. (A worker joining a cluster that has
  // stepped waits outside the world for its admit step: no epoch for it yet.)
  gift::v1::LeaveRequest leave;
  leave.set_member_id(c);
  ASSERT_TRUE(state_->Leave(leave).ok());
  clock_.Advance(absl::Seconds(1));
  gift::v1::StatusResponse s = Status();
  EXPECT_EQ(s.slowest_step(), 5u);
  EXPECT_EQ(s.slowest_wait_ms(), 1000);
}

}  // namespace
}  // namespace gift::coordinator
