// MemberSession and CoordinatorClient against an in-process fake Coordinator
// on loopback: join, heartbeats, watch (and its reconnection), lease loss and
// re-join, basis publish / fetch with chunking and checksums, leave.
#include "common/control/member_session.h"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/crc32c.h"
#include "common/control/coordinator_client.h"
#include "common/control/state_follower.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "gtest/gtest.h"

namespace gift::control {
namespace {

namespace v1 = ::gift::v1;

// Just enough of a coordinator: members by id, a state whose revision the
// test bumps, and stored basis bytes.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest* request,
                    v1::JoinResponse* response) override {
    absl::MutexLock lock(&mu_);
    const std::string id = absl::StrCat("m", ++next_id_);
    live_[id] = request->name();
    ++joins_;
    v1::Member* member = state_.add_workers();
    member->set_member_id(id);
    member->set_name(request->name());
    member->set_rank(state_.workers_size() - 1);
    state_.set_epoch(state_.epoch() + 1);
    state_.set_revision(state_.revision() + 1);
    response->set_member_id(id);
    response->set_rank(member->rank());
    response->set_epoch(state_.epoch());
    response->set_lease_ttl_ms(200);
    if (keys_on_) response->mutable_dataplane_key()->set_key(std::string(32, 'k'));
    *response->mutable_state() = state_;
    return grpc::Status::OK;
  }

  // The servers' keys (32 bytes of 's'), unless the next refusals are due.
  grpc::Status GetDataPlaneKeys(grpc::ServerContext*, const v1::GetDataPlaneKeysRequest*,
                                v1::DataPlaneKeys* response) override {
    absl::MutexLock lock(&mu_);
    ++key_fetches_;
    if (refuse_key_fetches_ > 0) {
      --refuse_key_fetches_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused for the test");
    }
    response->set_epoch(state_.epoch());
    for (const v1::Member& s : state_.servers()) {
      v1::PeerDataPlaneKey* peer = response->add_peers();
      peer->set_member_id(s.member_id());
      peer->set_rank(s.rank());
      peer->set_key(std::string(32, 's'));
    }
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest* request,
                     v1::LeaveResponse*) override {
    absl::MutexLock lock(&mu_);
    if (live_.erase(request->member_id()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown member");
    }
    left_.push_back(request->member_id());
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (!live_.contains(request->member_id())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("unknown member ", request->member_id()));
    }
    ++heartbeats_;
    last_step_ = request->last_step();
    if (keys_on_) response->mutable_dataplane_key()->set_key(std::string(32, 'k'));
    response->set_epoch(state_.epoch());
    response->set_revision(state_.revision());
    return grpc::Status::OK;
  }

  grpc::Status Watch(grpc::ServerContext* context, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::ClusterState>* writer) override {
    uint64_t sent = 0;
    while (!context->IsCancelled()) {
      v1::ClusterState state;
      {
        absl::MutexLock lock(&mu_);
        auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return state_.revision() > sent || shutting_down_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(20));
        if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
        if (state_.revision() <= sent) continue;
        state = state_;
      }
      sent = state.revision();
      if (!writer->Write(state)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status PublishBasis(grpc::ServerContext*,
                            grpc::ServerReader<v1::PublishBasisRequest>* reader,
                            v1::PublishBasisResponse* response) override {
    v1::PublishBasisRequest message;
    v1::BasisHeader header;
    std::string bytes;
    int messages = 0;
    while (reader->Read(&message)) {
      if (message.has_header()) header = message.header();
      bytes += message.data();
      ++messages;
    }
    if (crc32c::Value(bytes.data(), bytes.size()) != header.crc32c() ||
        bytes.size() != header.size_bytes()) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS, "checksum");
    }
    absl::MutexLock lock(&mu_);
    publish_messages_ = messages;
    header_ = header;
    basis_ = bytes;
    response->set_tentative_activation_step(7);
    return grpc::Status::OK;
  }

  grpc::Status FetchBasis(grpc::ServerContext*, const v1::FetchBasisRequest*,
                          grpc::ServerWriter<v1::BasisChunk>* writer) override {
    absl::MutexLock lock(&mu_);
    v1::BasisChunk chunk;
    *chunk.mutable_header() = header_;
    chunk.set_data(basis_);
    if (corrupt_fetch_) (*chunk.mutable_data())[0] ^= 1;
    writer->Write(chunk);
    return grpc::Status::OK;
  }

  grpc::Status AckBasis(grpc::ServerContext*, const v1::AckBasisRequest* request,
                        v1::AckBasisResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (request->version() != header_.version()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown version");
    }
    response->set_committed(true);
    response->set_activation_step(7);
    return grpc::Status::OK;
  }

  // Test controls.
  void BumpRevision(uint32_t rank_of_first) {
    absl::MutexLock lock(&mu_);
    state_.set_revision(state_.revision() + 1);
    state_.set_epoch(state_.epoch() + 1);
    if (state_.workers_size() > 0) state_.mutable_workers(0)->set_rank(rank_of_first);
  }
  void ForgetAllMembers() {
    absl::MutexLock lock(&mu_);
    live_.clear();
    state_.clear_workers();
  }
  // ... and tells the watchers: a new epoch without them.
  void EvictAllMembers() {
    absl::MutexLock lock(&mu_);
    live_.clear();
    state_.clear_workers();
    state_.set_epoch(state_.epoch() + 1);
    state_.set_revision(state_.revision() + 1);
  }
  // Data-plane keys on: members get a key at Join and in every beat.
  void set_keys_on() {
    absl::MutexLock lock(&mu_);
    keys_on_ = true;
  }
  // A server joins (a new epoch); the next `refusals` key fetches fail.
  void AddServer(const std::string& id, int refusals) {
    absl::MutexLock lock(&mu_);
    v1::Member* server = state_.add_servers();
    server->set_member_id(id);
    server->set_role(v1::MEMBER_ROLE_SERVER);
    server->set_rank(state_.servers_size() - 1);
    refuse_key_fetches_ = refusals;
    state_.set_epoch(state_.epoch() + 1);
    state_.set_revision(state_.revision() + 1);
  }
  int key_fetches() const {
    absl::MutexLock lock(&mu_);
    return key_fetches_;
  }
  void ShutDown() {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  void set_corrupt_fetch(bool corrupt) {
    absl::MutexLock lock(&mu_);
    corrupt_fetch_ = corrupt;
  }
  int joins() const {
    absl::MutexLock lock(&mu_);
    return joins_;
  }
  int heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  uint64_t last_step() const {
    absl::MutexLock lock(&mu_);
    return last_step_;
  }
  std::vector<std::string> left() const {
    absl::MutexLock lock(&mu_);
    return left_;
  }
  int publish_messages() const {
    absl::MutexLock lock(&mu_);
    return publish_messages_;
  }
  void set_revision(uint64_t revision) {
    absl::MutexLock lock(&mu_);
    state_.set_revision(revision);
  }

 private:
  mutable absl::Mutex mu_;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int joins_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  int publish_messages_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool corrupt_fetch_ ABSL_GUARDED_BY(mu_) = false;
  bool keys_on_ ABSL_GUARDED_BY(mu_) = false;
  int refuse_key_fetches_ ABSL_GUARDED_BY(mu_) = 0;
  int key_fetches_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> live_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> left_ ABSL_GUARDED_BY(mu_);
  v1::ClusterState state_ ABSL_GUARDED_BY(mu_);
  v1::BasisHeader header_ ABSL_GUARDED_BY(mu_);
  std::string basis_ ABSL_GUARDED_BY(mu_);
};

// A FakeCoordinator served on a loopback port that survives restarts.
class FakeServer {
 public:
  explicit FakeServer(int port = 0) { Start(port); }
  ~FakeServer() { Stop(); }

  void Start(int port) {
    service_ = std::make_unique<FakeCoordinator>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void Stop() {
    if (server_ == nullptr) return;
    service_->ShutDown();
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }
  FakeCoordinator& service() { return *service_; }

 private:
  int port_ = 0;
  std::unique_ptr<FakeCoordinator> service_;
  std::unique_ptr<grpc::Server> server_;
};

MemberSessionOptions Options(const std::string& name) {
  MemberSessionOptions options;
  options.name = name;
  options.rpc_timeout = absl::Seconds(2);
  options.min_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(100);
  return options;
}

// Polls `condition` every 5 ms for up to 5 s.
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

TEST(MemberSessionTest, JoinsWatchesAndFollowsRank) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->member_id(), "m1");
  EXPECT_EQ((*session)->rank(), 0u);
  EXPECT_EQ((*session)->epoch(), 1u);
  EXPECT_EQ((*session)->lease_ttl_ms(), 200);
  EXPECT_EQ((*session)->state()->workers_size(), 1);

  server.service().BumpRevision(/*rank_of_first=*/3);
  auto state = (*session)->WaitForRevision(2, absl::Seconds(5));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->revision(), 2u);
  EXPECT_EQ((*session)->rank(), 3u);
  EXPECT_EQ((*session)->epoch(), 2u);

  auto missing = (*session)->WaitForRevision(100, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(missing.status())) << missing.status();
}

TEST(MemberSessionTest, HeartbeatsCarryTheLastStep) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  (*session)->SetLastStep(41);
  // The lease thread beats every 200 ms / 4 without being asked.
  EXPECT_TRUE(Eventually([&] { return server.service().last_step() == 41; }));
  EXPECT_TRUE(Eventually([&] { return server.service().heartbeats() >= 3; }));
  (*session)->SetLastStep(42);
  EXPECT_TRUE((*session)->HeartbeatNow().ok());
  EXPECT_EQ(server.service().last_step(), 42u);
}

TEST(MemberSessionTest, HeartbeatsReportTheFirstCompletedStepAtOnce) {
  FakeServer server;
  MemberSessionOptions options = Options("w0");
  options.heartbeat_interval = absl::Minutes(10);  // no beat but the one asked for
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()), options);
  ASSERT_TRUE(session.ok()) << session.status();
  (*session)->SetLastStep(1);
  EXPECT_TRUE(Eventually([&] { return server.service().last_step() == 1; }));
  EXPECT_EQ(server.service().heartbeats(), 1);
  // Later steps wait for the next beat.
  (*session)->SetLastStep(2);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(server.service().heartbeats(), 1);
}

TEST(MemberSessionTest, APeersKeyWhoseFetchFailedIsFetchedAgainAtTheNextBeats) {
  FakeServer server;
  server.service().set_keys_on();
  auto session =
      MemberSession::Start(CoordinatorClient::MakeChannel(server.address()), Options("w0"));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->dataplane_auth());
  EXPECT_FALSE((*session)->keys_missing());
  // A server joins, and the watch thread's fetches of its key fail (the
  // coordinator was briefly unreachable, or the fetch ran under an identity
  // a re-join replaced): the epoch's keys lack it until a beat fetches it.
  server.service().AddServer("s1", /*refusals=*/3);
  ASSERT_TRUE(Eventually([&] { return (*session)->state()->servers_size() == 1; }));
  ASSERT_TRUE(Eventually([&] {
    auto keys = (*session)->chunk_keys((*session)->state()->epoch());
    return !(*session)->keys_missing() && keys != nullptr && keys->peers.size() == 1 &&
           keys->peers[0].has_value();
  }));
  EXPECT_GE(server.service().key_fetches(), 4);
}

TEST(MemberSessionTest, RejoinsWhenTheLeaseIsLost) {
  FakeServer server;
  absl::Mutex mu;
  absl::Status reported;
  MemberSessionOptions options = Options("host-0/gpu0");
  options.on_rejoin = [&](const absl::Status& lost) {
    absl::MutexLock lock(&mu);
    reported = lost;
  };
  auto session =
      MemberSession::Start(CoordinatorClient::MakeChannel(server.address()), std::move(options));
  ASSERT_TRUE(session.ok()) << session.status();
  server.service().ForgetAllMembers();
  ASSERT_TRUE(Eventually([&] { return (*session)->rejoins() == 1; }));
  EXPECT_EQ((*session)->member_id(), "m2");
  EXPECT_EQ(server.service().joins(), 2);
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(absl::IsNotFound(reported)) << reported;
  EXPECT_NE(reported.message().find("Heartbeat"), absl::string_view::npos) << reported;
}

TEST(MemberSessionTest, RejoinsAsSoonAsAStateSaysItWasEvicted) {
  FakeServer server;
  MemberSessionOptions options = Options("host-0/gpu0");
  // No beat within the test: only the evicting state can start the re-join.
  options.heartbeat_interval = absl::Minutes(10);
  auto session =
      MemberSession::Start(CoordinatorClient::MakeChannel(server.address()), std::move(options));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->WaitForRevision(1, absl::Seconds(5)).ok());
  server.service().EvictAllMembers();
  ASSERT_TRUE(Eventually([&] { return (*session)->rejoins() == 1; }));
  EXPECT_EQ((*session)->member_id(), "m2");
  // A state without the new member that is not of a later epoch (it has not
  // been named by any state since its join) starts nothing.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ((*session)->rejoins(), 1u);
  EXPECT_EQ(server.service().joins(), 2);
}

TEST(MemberSessionTest, WatchReconnectsAfterACoordinatorRestart) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  const int port = server.port();
  server.Stop();
  server.Start(port);
  // The new coordinator knows nothing: the session re-joins and the watch
  // stream comes back with the new coordinator's state.
  server.service().set_revision(50);
  ASSERT_TRUE((*session)->WaitForRevision(50, absl::Seconds(5)).ok());
  EXPECT_TRUE(Eventually([&] { return (*session)->rejoins() == 1; }));
}

TEST(MemberSessionTest, PublishesAndFetchesInChunksWithChecksums) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  std::string bytes(2 * kBasisChunkBytes + 123, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);

  auto published = (*session)->PublishBasis(/*tensor_id=*/1, /*version=*/1, /*rank=*/8, bytes);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->tentative_activation_step(), 7u);
  EXPECT_EQ(server.service().publish_messages(), 3);

  auto fetched = (*session)->FetchBasis(1, 1);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->bytes, bytes);
  EXPECT_EQ(fetched->header.rank(), 8u);
  EXPECT_EQ(fetched->header.crc32c(), crc32c::Value(bytes.data(), bytes.size()));

  server.service().set_corrupt_fetch(true);
  auto corrupt = (*session)->FetchBasis(1, 1);
  EXPECT_TRUE(absl::IsDataLoss(corrupt.status())) << corrupt.status();

  auto acked = (*session)->AckBasis(1, 1);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_TRUE(acked->committed());
  auto unknown = (*session)->AckBasis(1, 2);
  EXPECT_TRUE(absl::IsNotFound(unknown.status()));
  EXPECT_NE(unknown.status().message().find("AckBasis: "), absl::string_view::npos);
}

TEST(MemberSessionTest, CloseLeavesOnce) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->Close().ok());
  EXPECT_TRUE((*session)->Close().ok());
  session->reset();
  EXPECT_EQ(server.service().left(), std::vector<std::string>{"m1"});
}

// StateFollower (common/control/state_follower.h) over a real session:
// every new revision reaches on_revision, on_wake turns at least every tick
// without a revision, a closed session does not make it spin, Stop joins.
TEST(StateFollowerTest, HandsOverRevisionsAndWakesEveryTick) {
  FakeServer server;
  auto session = MemberSession::Start(CoordinatorClient::MakeChannel(server.address()),
                                      Options("host-0/gpu0"));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::Mutex mu;
  std::vector<uint64_t> revisions;
  int wakes = 0;
  StateFollower follower(
      session->get(), absl::Milliseconds(20),
      {.on_wake =
           [&] {
             absl::MutexLock lock(&mu);
             ++wakes;
           },
       .on_revision =
           [&](const v1::ClusterState& state) {
             absl::MutexLock lock(&mu);
             revisions.push_back(state.revision());
           }});
  auto seen = [&](uint64_t revision) {
    absl::MutexLock lock(&mu);
    return !revisions.empty() && revisions.back() == revision;
  };
  EXPECT_TRUE(Eventually([&] { return seen(1); }));  // the state the session started with
  server.service().BumpRevision(/*rank_of_first=*/0);
  EXPECT_TRUE(Eventually([&] { return seen(2); }));
  // With nothing new it still wakes, every tick.
  int before = 0;
  {
    absl::MutexLock lock(&mu);
    before = wakes;
  }
  absl::SleepFor(absl::Milliseconds(200));
  {
    absl::MutexLock lock(&mu);
    EXPECT_GE(wakes - before, 3);
    EXPECT_EQ(revisions, std::vector<uint64_t>({1, 2}));
  }
  // A closed session returns at once; the follower waits out its ticks.
  ASSERT_TRUE((*session)->Close().ok());
  {
    absl::MutexLock lock(&mu);
    before = wakes;
  }
  absl::SleepFor(absl::Milliseconds(200));
  {
    absl::MutexLock lock(&mu);
    EXPECT_LE(wakes - before, 15) << "spinning on a closed session";
  }
  follower.Stop();
  follower.Stop();
}

TEST(MemberSessionTest, StartFailsWithoutACoordinator) {
  int port = 0;
  {
    FakeServer server;  // reserve a port, then free it
    port = server.port();
  }
  auto session = MemberSession::Start(
      CoordinatorClient::MakeChannel(absl::StrCat("127.0.0.1:", port)), Options("host-0/gpu0"));
  EXPECT_TRUE(absl::IsUnavailable(session.status())) << session.status();
  EXPECT_NE(session.status().message().find("Join: "), absl::string_view::npos);

  auto no_name = MemberSession::Start(CoordinatorClient::MakeChannel("127.0.0.1:1"), {});
  EXPECT_TRUE(absl::IsInvalidArgument(no_name.status()));
}

}  // namespace
}  // namespace gift::control
