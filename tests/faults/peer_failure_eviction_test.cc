// ClusterStateMachine::ReportPeerFailure (cluster_state.h): what a confirmed
// and an unconfirmed report do to the membership, over the cluster state
// fixture (real SQLite file, fake clock).
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "tests/coordinator/cluster_state_fixture.h"

namespace gift::coordinator::testing {
namespace {

namespace v1 = ::gift::v1;

class PeerFailureEvictionTest : public ClusterStateMachineTest {
 protected:
  absl::StatusOr<v1::ReportPeerFailureResponse> Report(const std::string& reporter,
                                                       const std::string& suspect, bool confirmed) {
    v1::ReportPeerFailureRequest request;
    request.set_reporter_member_id(reporter);
    request.set_suspect_member_id(suspect);
    request.set_reason("peer failed: Endpoint timeout");
    return state_->ReportPeerFailure(request, confirmed);
  }
};

TEST_F(PeerFailureEvictionTest, OnlyAConfirmedReportEvictsAndTheEvictedWorkerIsToldWhy) {
  const std::string w0 = Join("w0").member_id();
  const std::string w1 = Join("w1").member_id();
  const std::string w2 = Join("w2").member_id();
  const std::string s0 = Join("s0", v1::MEMBER_ROLE_SERVER).member_id();
  for (const std::string& w : {w0, w1, w2}) ASSERT_TRUE(Heartbeat(w, 6).ok());
  const uint64_t epoch = state_->Snapshot()->epoch();

  // Unconfirmed: refused, nothing changes.
  auto refused = Report(s0, w2, /*confirmed=*/false);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("not confirmed"));
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch);
  EXPECT_EQ(state_->Snapshot()->workers_size(), 3);

  // Confirmed: one new epoch, the survivors re-ranked densely.
  auto evicted = Report(s0, w2, /*confirmed=*/true);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_TRUE(evicted->evicted());
  EXPECT_EQ(evicted->epoch(), epoch + 1);
  const auto snapshot = state_->Snapshot();
  EXPECT_EQ(snapshot->epoch(), epoch + 1);
  ASSERT_EQ(snapshot->workers_size(), 2);
  std::set<uint32_t> ranks;
  for (const v1::Member& m : snapshot->workers()) {
    EXPECT_NE(m.member_id(), w2);
    ranks.insert(m.rank());
  }
  EXPECT_EQ(ranks, (std::set<uint32_t>{0, 1}));
  // The next reports of the same failure change nothing.
  auto again = Report(w0, w2, /*confirmed=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->evicted());
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);
  // The evicted worker's next call says where it was and why.
  const absl::Status back = Heartbeat(w2, 7);
  EXPECT_TRUE(absl::IsFailedPrecondition(back)) << back;
  EXPECT_THAT(back.message(), ::testing::HasSubstr("evicted at step 6"));
  EXPECT_THAT(back.message(), ::testing::HasSubstr("a peer reported it failed"));
}

TEST_F(PeerFailureEvictionTest, BadReportsAreRefusedWithoutChanges) {
  const std::string w0 = Join("w0").member_id();
  const std::string s0 = Join("s0", v1::MEMBER_ROLE_SERVER).member_id();
  const uint64_t epoch = state_->Snapshot()->epoch();
  EXPECT_TRUE(absl::IsInvalidArgument(Report(w0, w0, true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Report(w0, "", true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Report("", s0, true).status()));
  EXPECT_TRUE(absl::IsNotFound(Report("m99", s0, true).status()));
  ASSERT_TRUE(Leave(w0).ok());
  // A reporter that is no longer a member is not heard either.
  EXPECT_TRUE(absl::IsFailedPrecondition(Report(w0, s0, true).status()));
  EXPECT_EQ(state_->Snapshot()->epoch(), epoch + 1);  // the leave only
  EXPECT_EQ(state_->Snapshot()->servers_size(), 1);
}

}  // namespace
}  // namespace gift::coordinator::testing
