// MemberConnections (server/coordinator/member_connections.h): the
// coordinator's own confirmation of a peer failure report.
#include "server/coordinator/member_connections.h"

#include "gtest/gtest.h"

namespace gift::coordinator {
namespace {

gift::v1::ReportPeerFailureRequest Report(const std::string& reporter, const std::string& suspect) {
  gift::v1::ReportPeerFailureRequest r;
  r.set_reporter_member_id(reporter);
  r.set_suspect_member_id(suspect);
  r.set_reason("endpoint error");
  return r;
}

TEST(MemberConnectionsTest, OnlyAMemberWhoseStreamsAllClosedIsDisconnected) {
  MemberConnections c;
  EXPECT_FALSE(c.Disconnected("m1")) << "never seen: the lease decides";
  c.Opened("m1");
  c.Opened("m1");  // a reconnect overlapping the old stream
  EXPECT_FALSE(c.Disconnected("m1"));
  EXPECT_TRUE(c.Closed("m1").empty());
  EXPECT_FALSE(c.Disconnected("m1")) << "one stream is still open";
  EXPECT_TRUE(c.Closed("m1").empty());
  EXPECT_TRUE(c.Disconnected("m1"));
  c.Opened("m1");  // back
  EXPECT_FALSE(c.Disconnected("m1"));
  // Operators' streams carry no member id and count for nobody.
  c.Opened("");
  EXPECT_TRUE(c.Closed("").empty());
  EXPECT_FALSE(c.Disconnected(""));
}

// A member killed between its Join and its Watch never opens a stream: it
// counts as disconnected once the grace for opening one has passed (not
// after its lease), and one that opens its stream in time is connected.
TEST(MemberConnectionsTest, AJoinedMemberThatOpensNoStreamIsDisconnectedAfterTheGrace) {
  MemberConnections c(absl::Seconds(2), /*stream_grace=*/absl::Milliseconds(50));
  c.Joined("m1");
  c.Joined("m2");
  EXPECT_FALSE(c.Disconnected("m1")) << "within the grace";
  EXPECT_FALSE(c.CheckOrRemember(Report("m3", "m1")));
  c.Opened("m2");
  absl::SleepFor(absl::Milliseconds(80));
  EXPECT_TRUE(c.Disconnected("m1"));
  EXPECT_TRUE(c.CheckOrRemember(Report("m3", "m1")));
  EXPECT_FALSE(c.Disconnected("m2")) << "its stream is open";
  c.Opened("m1");  // late, but alive after all
  EXPECT_FALSE(c.Disconnected("m1"));
  EXPECT_TRUE(c.Closed("m2").empty());
  EXPECT_TRUE(c.Disconnected("m2"));
  c.Joined("m2");  // a Join answered twice does not undo what the streams said
  EXPECT_TRUE(c.Disconnected("m2"));
}

TEST(MemberConnectionsTest, AReportBeforeTheStreamClosesIsConfirmedWhenItCloses) {
  MemberConnections c;
  c.Opened("m2");
  EXPECT_FALSE(c.CheckOrRemember(Report("m1", "m2")));
  EXPECT_FALSE(c.CheckOrRemember(Report("m3", "m2")));
  const std::vector<gift::v1::ReportPeerFailureRequest> confirmed = c.Closed("m2");
  ASSERT_EQ(confirmed.size(), 2u);
  EXPECT_EQ(confirmed[0].suspect_member_id(), "m2");
  EXPECT_EQ(confirmed[0].reporter_member_id(), "m1");
  EXPECT_EQ(confirmed[1].reporter_member_id(), "m3");
  // Handed out once.
  c.Opened("m2");
  EXPECT_TRUE(c.Closed("m2").empty());
  // Now disconnected: a report is confirmed at once.
  EXPECT_TRUE(c.CheckOrRemember(Report("m1", "m2")));
}

TEST(MemberConnectionsTest, ARememberedReportExpiresAfterItsWindow) {
  MemberConnections c(absl::Milliseconds(1));
  c.Opened("m2");
  EXPECT_FALSE(c.CheckOrRemember(Report("m1", "m2")));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(c.Closed("m2").empty()) << "a healthy member's later reconnect is not an eviction";
}

}  // namespace
}  // namespace gift::coordinator
