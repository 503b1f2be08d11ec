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
