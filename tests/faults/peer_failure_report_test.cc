// ReportPeerFailure against a real gift-coordinator process
// (GIFT_COORDINATOR_BIN) on loopback, with member sessions and raw Watch
// streams in this process: a report evicts only what the coordinator itself
// sees disconnected.
#include <grpcpp/client_context.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "gtest/gtest.h"
#include "tools/gift-cluster/coordinator_process.h"

namespace gift::control {
namespace {

using tools::CoordinatorProcess;
using tools::CoordinatorProcessOptions;

namespace v1 = ::gift::v1;

constexpr absl::Duration kWait = absl::Seconds(10);

bool IsLive(const v1::ClusterState& s, const std::string& id) {
  for (const auto* members : {&s.workers(), &s.servers()}) {
    for (const v1::Member& m : *members) {
      if (m.member_id() == id) return true;
    }
  }
  return false;
}

// A Watch stream opened under a member id, closed on demand, as a member's
// session would hold it until its process dies.
class RawWatch {
 public:
  RawWatch(const CoordinatorClient& client, const std::string& member_id) {
    v1::WatchRequest request;
    request.set_member_id(member_id);
    reader_ = client.Watch(&context_, request);
    v1::ClusterState first;
    EXPECT_TRUE(reader_->Read(&first));  // the stream is open at the coordinator
  }
  void Close() {
    context_.TryCancel();
    v1::ClusterState s;
    while (reader_->Read(&s)) {
    }
    (void)reader_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::ClusterState>> reader_;
};

class PeerFailureReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gift-peer-failure-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    CoordinatorProcessOptions options;
    options.binary = GIFT_COORDINATOR_BIN;
    options.state_file = dir_ + "/coordinator.db";
    options.listen = "127.0.0.1:0";  // the default lease (10 s): nothing expires here
    auto started = CoordinatorProcess::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = *std::move(started);
    client_ = std::make_unique<CoordinatorClient>(
        CoordinatorClient::MakeChannel(coordinator_->address()), kWait);
  }
  void TearDown() override {
    sessions_.clear();
    if (coordinator_ != nullptr) {
      EXPECT_TRUE(coordinator_->Stop().ok()) << coordinator_->log();
    }
    std::filesystem::remove_all(dir_);
  }

  MemberSession& Join(const std::string& name, v1::MemberRole role) {
    MemberSessionOptions options;
    options.name = name;
    options.role = role;
    auto session =
        MemberSession::Start(CoordinatorClient::MakeChannel(coordinator_->address()), options);
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) std::abort();
    sessions_.push_back(*std::move(session));
    return *sessions_.back();
  }

  // A member joined without a session: nothing renews or watches for it.
  std::string JoinBare(const std::string& name, v1::MemberRole role) {
    v1::JoinRequest join;
    join.set_name(name);
    join.set_role(role);
    auto joined = client_->Join(join);
    EXPECT_TRUE(joined.ok()) << joined.status();
    return joined.ok() ? joined->member_id() : "";
  }

  v1::ReportPeerFailureRequest Report(const std::string& reporter, const std::string& suspect) {
    v1::ReportPeerFailureRequest r;
    r.set_reporter_member_id(reporter);
    r.set_suspect_member_id(suspect);
    r.set_reason("UCX endpoint error: Connection reset by remote peer");
    return r;
  }

  v1::ClusterState Current() { return client_->GetStatus()->state(); }

  // A heartbeat of `member` in step `waiting_step` (0: in none).
  absl::StatusOr<v1::HeartbeatResponse> Beat(const std::string& member, uint64_t waiting_step) {
    v1::HeartbeatRequest beat;
    beat.set_member_id(member);
    beat.set_waiting_step(waiting_step);
    return client_->Heartbeat(beat);
  }

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<CoordinatorClient> client_;
  std::vector<std::unique_ptr<MemberSession>> sessions_;
};

TEST_F(PeerFailureReportTest, AHealthyMemberIsNotEvictedOnAReportersWord) {
  MemberSession& worker = Join("w0", v1::MEMBER_ROLE_WORKER);
  MemberSession& server = Join("s0", v1::MEMBER_ROLE_SERVER);
  // The server's session watches: wait until its stream is open.
  ASSERT_TRUE(
      server.WaitFor([](const v1::ClusterState& s) { return s.servers_size() == 1; }, kWait).ok());
  absl::SleepFor(absl::Milliseconds(200));
  const uint64_t epoch = Current().epoch();
  auto lie = worker.ReportPeerFailure(server.member_id(), "made up");
  ASSERT_FALSE(lie.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(lie.status())) << lie.status();
  EXPECT_NE(lie.status().message().find("not confirmed"), std::string::npos) << lie.status();
  const v1::ClusterState after = Current();
  EXPECT_EQ(after.epoch(), epoch);
  EXPECT_TRUE(IsLive(after, server.member_id()));

  // A member the coordinator never saw watching is not confirmed either
  // (its lease decides), nor is a self-report or a non-member's.
  const std::string silent = JoinBare("s-silent", v1::MEMBER_ROLE_SERVER);
  EXPECT_TRUE(absl::IsFailedPrecondition(worker.ReportPeerFailure(silent, "x").status()));
  EXPECT_TRUE(IsLive(Current(), silent));
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->ReportPeerFailure(Report(worker.member_id(), worker.member_id())).status()));
  EXPECT_TRUE(
      absl::IsNotFound(client_->ReportPeerFailure(Report("m999", server.member_id())).status()));
  EXPECT_TRUE(IsLive(Current(), server.member_id()));
}

TEST_F(PeerFailureReportTest, AMemberWhoseStreamClosedIsEvictedAtOnceWithANewEpoch) {
  MemberSession& worker = Join("w0", v1::MEMBER_ROLE_WORKER);
  const std::string suspect = JoinBare("s0", v1::MEMBER_ROLE_SERVER);
  RawWatch watch(*client_, suspect);
  const uint64_t epoch = Current().epoch();
  watch.Close();  // what the kernel does to a killed process's connection
  // The close reaches the coordinator asynchronously; the report is either
  // confirmed at once or remembered and confirmed when it arrives.
  auto report = worker.ReportPeerFailure(suspect, "endpoint error");
  EXPECT_TRUE(report.ok() || absl::IsFailedPrecondition(report.status())) << report.status();
  // Past `epoch`: the worker's own view may still be of the epoch before
  // the suspect joined, where it is not live either.
  auto gone = worker.WaitFor(
      [&](const v1::ClusterState& s) { return s.epoch() > epoch && !IsLive(s, suspect); }, kWait);
  ASSERT_TRUE(gone.ok()) << gone.status() << coordinator_->log();
  EXPECT_EQ((*gone)->epoch(), epoch + 1);
  if (report.ok()) {
    EXPECT_TRUE(report->evicted());
    EXPECT_EQ(report->epoch(), epoch + 1);
  }
  // Reports of a member already gone are answered OK, evicting nothing.
  auto again = worker.ReportPeerFailure(suspect, "endpoint error");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->evicted());
  EXPECT_EQ(Current().epoch(), epoch + 1);
  // The evicted member's next call is told why.
  v1::HeartbeatRequest beat;
  beat.set_member_id(suspect);
  EXPECT_TRUE(absl::IsFailedPrecondition(client_->Heartbeat(beat).status()));
}

TEST_F(PeerFailureReportTest, AReportMadeWhileTheSuspectIsConnectedCountsWhenItsStreamCloses) {
  MemberSession& worker = Join("w0", v1::MEMBER_ROLE_WORKER);
  const std::string suspect = JoinBare("s0", v1::MEMBER_ROLE_SERVER);
  RawWatch watch(*client_, suspect);
  auto early = worker.ReportPeerFailure(suspect, "send failed");
  EXPECT_TRUE(absl::IsFailedPrecondition(early.status())) << early.status();
  EXPECT_TRUE(IsLive(Current(), suspect));
  watch.Close();
  auto gone = worker.WaitFor([&](const v1::ClusterState& s) { return !IsLive(s, suspect); }, kWait);
  ASSERT_TRUE(gone.ok()) << gone.status() << coordinator_->log();
  // The log line comes through a pipe, possibly after the Watch said so.
  auto confirmed = coordinator_->WaitForLine(
      [](const std::string& line) {
        return line.find("peer_failure_confirmed") != std::string::npos;
      },
      kWait);
  EXPECT_TRUE(confirmed.ok()) << confirmed.status() << coordinator_->log();
}

// Without any report: a member whose streams all closed is evicted as soon
// as a step waits for it (a worker in a step says so in its heartbeats), and
// not before; one whose stream is open is waited for.
TEST_F(PeerFailureReportTest, AMemberWhoseStreamClosedIsEvictedWhenAStepWaitsForIt) {
  const std::string waiter = JoinBare("w0", v1::MEMBER_ROLE_WORKER);
  const std::string lost = JoinBare("w1", v1::MEMBER_ROLE_WORKER);
  RawWatch waiter_watch(*client_, waiter);
  RawWatch watch(*client_, lost);
  watch.Close();
  absl::SleepFor(absl::Milliseconds(200));  // the close reaches the coordinator
  ASSERT_TRUE(Beat(waiter, 0).ok());
  const v1::ClusterState before = Current();
  EXPECT_TRUE(IsLive(before, lost)) << "nothing waits for it yet";

  ASSERT_TRUE(Beat(waiter, 1).ok());
  const v1::ClusterState after = Current();
  EXPECT_FALSE(IsLive(after, lost)) << coordinator_->log();
  EXPECT_TRUE(IsLive(after, waiter));
  EXPECT_EQ(after.epoch(), before.epoch() + 1);
  auto told = Beat(lost, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(told.status())) << told.status();
  EXPECT_NE(told.status().message().find(
                "its connection to the coordinator died while a step waited for it"),
            std::string::npos)
      << told.status();
}

TEST_F(PeerFailureReportTest, AConnectedMemberAStepWaitsForIsNotEvicted) {
  const std::string waiter = JoinBare("w0", v1::MEMBER_ROLE_WORKER);
  const std::string late = JoinBare("w1", v1::MEMBER_ROLE_WORKER);
  const std::string server = JoinBare("s0", v1::MEMBER_ROLE_SERVER);
  RawWatch waiter_watch(*client_, waiter);
  RawWatch late_watch(*client_, late);
  RawWatch server_watch(*client_, server);
  const uint64_t epoch = Current().epoch();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(Beat(waiter, 1).ok());
    absl::SleepFor(absl::Milliseconds(250));
  }
  const v1::ClusterState after = Current();
  EXPECT_TRUE(IsLive(after, late));
  EXPECT_TRUE(IsLive(after, server));
  EXPECT_EQ(after.epoch(), epoch);
}

TEST_F(PeerFailureReportTest, AServerWhoseStreamClosesWhileAWorkerIsInAStepIsEvicted) {
  const std::string waiter = JoinBare("w0", v1::MEMBER_ROLE_WORKER);
  const std::string server = JoinBare("s0", v1::MEMBER_ROLE_SERVER);
  RawWatch waiter_watch(*client_, waiter);
  RawWatch watch(*client_, server);
  ASSERT_TRUE(Beat(waiter, 1).ok());
  EXPECT_TRUE(IsLive(Current(), server));
  watch.Close();  // the close itself finds the step waiting
  const absl::Time deadline = absl::Now() + kWait;
  while (IsLive(Current(), server) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(IsLive(Current(), server)) << coordinator_->log();
  auto evicted = coordinator_->WaitForLine(
      [](const std::string& line) {
        return line.find("awaited_member_disconnected") != std::string::npos;
      },
      kWait);
  EXPECT_TRUE(evicted.ok()) << evicted.status() << coordinator_->log();
}

}  // namespace
}  // namespace gift::control
