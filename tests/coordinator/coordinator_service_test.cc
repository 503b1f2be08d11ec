// The Coordinator service on a real gRPC server on loopback: every RPC, the
// streams, the health service, and the status code of each bad request.
#include "server/coordinator/coordinator_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/coordinator/test_util.h"
#include "tests/testing/coordinator_server.h"

namespace gift::coordinator {
namespace {

using testing::FakeClock;
using ::testing::HasSubstr;
using testing::MakeBasisBytes;

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.lease_ttl = absl::Seconds(10);
    options.chunk_bytes = 4096;
    options.max_basis_bytes = 4 << 20;
    auto server = test::CoordinatorServer::Start(
        {.cluster = options, .clock = &clock_, .health_service = true});
    ASSERT_TRUE(server.ok()) << server.status();
    coordinator_ = *std::move(server);
    state_ = coordinator_->state();
    service_ = coordinator_->service();
    channel_ = coordinator_->channel();
    stub_ = coordinator_->stub();
  }

  std::unique_ptr<grpc::ClientContext> Context() { return test::DeadlineContext(); }

  gift::v1::JoinResponse Join(const std::string& name,
                              gift::v1::MemberRole role = gift::v1::MEMBER_ROLE_WORKER) {
    auto response = test::JoinOverRpc(*stub_, name, role);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(gift::v1::JoinResponse());
  }

  gift::v1::TensorInfo Register(const std::string& name, int64_t d_out, int64_t d_in) {
    gift::v1::RegisterTensorsRequest request;
    gift::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name(name);
    spec->add_shape(d_out);
    spec->add_shape(d_in);
    spec->set_dtype(gift::v1::DTYPE_FLOAT32);
    gift::v1::RegisterTensorsResponse response;
    grpc::Status s = stub_->RegisterTensors(Context().get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.tensors_size() == 1 ? response.tensors(0) : gift::v1::TensorInfo();
  }

  std::string OwnerOf(uint64_t tensor_id) {
    for (const auto& b : state_->Snapshot()->bases()) {
      if (b.tensor_id() == tensor_id) return b.owner_member_id();
    }
    return "";
  }

  static gift::v1::BasisHeader Header(const std::string& member_id, uint64_t tensor_id,
                                      uint64_t version, const std::string& bytes) {
    gift::v1::BasisHeader h;
    h.set_member_id(member_id);
    h.set_tensor_id(tensor_id);
    h.set_version(version);
    h.set_rank(2);
    h.set_size_bytes(bytes.size());
    h.set_crc32c(crc32c::Value(bytes.data(), bytes.size()));
    return h;
  }

  // Streams `messages` to PublishBasis and returns the final status.
  grpc::Status PublishMessages(const std::vector<gift::v1::PublishBasisRequest>& messages,
                               gift::v1::PublishBasisResponse* response) {
    auto context = Context();
    auto writer = stub_->PublishBasis(context.get(), response);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;  // the server finished early
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Header, then the bytes in pieces of `piece`.
  grpc::Status Publish(const gift::v1::BasisHeader& header, const std::string& bytes,
                       size_t piece = kMaxBasisChunkBytes,
                       gift::v1::PublishBasisResponse* response = nullptr) {
    std::vector<gift::v1::PublishBasisRequest> messages(1);
    *messages[0].mutable_header() = header;
    for (size_t offset = 0; offset < bytes.size(); offset += piece) {
      messages.emplace_back().set_data(bytes.substr(offset, piece));
    }
    gift::v1::PublishBasisResponse ignored;
    return PublishMessages(messages, response != nullptr ? response : &ignored);
  }

  grpc::Status Fetch(const std::string& member_id, uint64_t tensor_id, uint64_t version,
                     gift::v1::BasisHeader* header, std::string* bytes, int* messages) {
    gift::v1::FetchBasisRequest request;
    request.set_member_id(member_id);
    request.set_tensor_id(tensor_id);
    request.set_version(version);
    auto context = Context();
    auto reader = stub_->FetchBasis(context.get(), request);
    gift::v1::BasisChunk chunk;
    *messages = 0;
    while (reader->Read(&chunk)) {
      if (chunk.has_header()) *header = chunk.header();
      bytes->append(chunk.data());
      ++*messages;
    }
    return reader->Finish();
  }

  FakeClock clock_;  // outlives coordinator_
  std::unique_ptr<test::CoordinatorServer> coordinator_;
  ClusterStateMachine* state_ = nullptr;    // owned by coordinator_
  CoordinatorService* service_ = nullptr;  // owned by coordinator_
  std::shared_ptr<grpc::Channel> channel_;
  gift::v1::Coordinator::Stub* stub_ = nullptr;  // owned by coordinator_
};

TEST_F(CoordinatorServiceTest, HealthIsServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(Context().get(), request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(CoordinatorServiceTest, MembershipAndOperatorRpcs) {
  gift::v1::JoinResponse a = Join("a");
  EXPECT_EQ(a.rank(), 0u);
  EXPECT_EQ(a.epoch(), 1u);
  EXPECT_EQ(a.state().workers_size(), 1);

  gift::v1::HeartbeatRequest hb;
  hb.set_member_id(a.member_id());
  hb.set_epoch(a.epoch());
  hb.set_last_step(3);
  gift::v1::HeartbeatResponse hb_response;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), hb, &hb_response).ok());
  EXPECT_EQ(hb_response.epoch(), 1u);
  EXPECT_EQ(hb_response.state(), gift::v1::MEMBER_STATE_ACTIVE);
  EXPECT_EQ(hb_response.lease_expires_unix_ms(), absl::ToUnixMillis(clock_.Now()) + 10000);

  gift::v1::TensorInfo t = Register("layers.0.w", 8, 16);
  EXPECT_EQ(t.num_elements(), 128u);

  gift::v1::Policy policy;
  ASSERT_TRUE(stub_->GetPolicy(Context().get(), gift::v1::GetPolicyRequest(), &policy).ok());
  EXPECT_EQ(policy.version(), 1u);
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_refresh()->set_period_steps(50);
  set.set_expected_version(1);
  ASSERT_TRUE(stub_->SetPolicy(Context().get(), set, &policy).ok());
  EXPECT_EQ(policy.version(), 2u);
  EXPECT_EQ(policy.refresh().period_steps(), 50u);

  gift::v1::RequestRefreshRequest refresh;
  refresh.set_tensor_glob("layers.*");
  gift::v1::RequestRefreshResponse refresh_response;
  ASSERT_TRUE(stub_->RequestRefresh(Context().get(), refresh, &refresh_response).ok());
  EXPECT_THAT(refresh_response.tensors(), ::testing::ElementsAre("layers.0.w"));

  gift::v1::SetRankRequest rank;
  rank.set_rank(16);
  gift::v1::SetRankResponse rank_response;
  ASSERT_TRUE(stub_->SetRank(Context().get(), rank, &rank_response).ok());
  EXPECT_EQ(rank_response.policy().transform().rank(), 16u);
  EXPECT_EQ(rank_response.tensors_size(), 1);

  gift::v1::StatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), gift::v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.version(), "test-version");
  EXPECT_EQ(status.slowest_step(), 4u);
  EXPECT_EQ(status.state().bases(0).refresh_requests(), 2u);

  gift::v1::DrainRequest drain;
  drain.set_member_id(a.member_id());
  gift::v1::DrainResponse drain_response;
  ASSERT_TRUE(stub_->Drain(Context().get(), drain, &drain_response).ok());
  EXPECT_EQ(drain_response.member().state(), gift::v1::MEMBER_STATE_DRAINING);

  gift::v1::LeaveRequest leave;
  leave.set_member_id(a.member_id());
  gift::v1::LeaveResponse leave_response;
  ASSERT_TRUE(stub_->Leave(Context().get(), leave, &leave_response).ok());
  EXPECT_EQ(leave_response.epoch(), 2u);
}

TEST_F(CoordinatorServiceTest, PublishFetchAckAcrossChunks) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  // 600 x 600 with rank 240: about 1.2 MB of basis, so two chunks each way.
  gift::v1::TensorInfo t = Register("big", 600, 600);
  const std::string owner = OwnerOf(t.tensor_id());
  const std::string other = owner == a ? b : a;
  const std::string bytes = MakeBasisBytes(t.tensor_id(), 1, 600, 600, 240);
  ASSERT_GT(bytes.size(), kMaxBasisChunkBytes);
  gift::v1::PublishBasisResponse published;
  grpc::Status s =
      Publish(Header(owner, t.tensor_id(), 1, bytes), bytes, kMaxBasisChunkBytes, &published);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(published.tentative_activation_step(), state_->Snapshot()->frozen_through_step());

  gift::v1::BasisHeader header;
  std::string fetched;
  int messages = 0;
  s = Fetch(other, t.tensor_id(), 1, &header, &fetched, &messages);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(messages, 2);
  EXPECT_EQ(fetched, bytes);
  EXPECT_EQ(header.size_bytes(), bytes.size());
  EXPECT_EQ(header.crc32c(), crc32c::Value(bytes.data(), bytes.size()));
  EXPECT_EQ(header.member_id(), owner);

  gift::v1::AckBasisRequest ack;
  ack.set_member_id(other);
  ack.set_tensor_id(t.tensor_id());
  ack.set_version(1);
  gift::v1::AckBasisResponse ack_response;
  ASSERT_TRUE(stub_->AckBasis(Context().get(), ack, &ack_response).ok());
  EXPECT_TRUE(ack_response.committed());
  EXPECT_EQ(ack_response.activation_step(), published.tentative_activation_step());

  // The version 0 entry is direct and has no bytes.
  fetched.clear();
  s = Fetch(other, t.tensor_id(), 0, &header, &fetched, &messages);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(header.direct());
  EXPECT_TRUE(fetched.empty());
}

TEST_F(CoordinatorServiceTest, BadPublishesGetTheirCodes) {
  const std::string a = Join("a").member_id();
  const std::string b = Join("b").member_id();
  gift::v1::TensorInfo t = Register("w", 8, 16);
  const std::string owner = OwnerOf(t.tensor_id());
  const std::string other = owner == a ? b : a;
  const std::string bytes = MakeBasisBytes(t.tensor_id(), 1, 8, 16);
  const gift::v1::BasisHeader good = Header(owner, t.tensor_id(), 1, bytes);
  gift::v1::PublishBasisResponse response;

  // No header first.
  std::vector<gift::v1::PublishBasisRequest> headless(1);
  headless[0].set_data(bytes);
  EXPECT_EQ(PublishMessages(headless, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PublishMessages({}, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Fewer bytes than announced; more bytes than announced.
  EXPECT_EQ(Publish(good, bytes.substr(0, 100)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(good, bytes + "extra", 64).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A data message above 1 MiB.
  gift::v1::BasisHeader huge = good;
  huge.set_size_bytes(kMaxBasisChunkBytes + 1);
  EXPECT_EQ(Publish(huge, std::string(kMaxBasisChunkBytes + 1, 'x'), kMaxBasisChunkBytes + 1)
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Above the coordinator's limit: refused at the header.
  gift::v1::BasisHeader oversized = good;
  oversized.set_size_bytes(uint64_t{1} << 30);
  grpc::Status s = Publish(oversized, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("limit"));
  // Wrong checksum, corrupt bytes.
  gift::v1::BasisHeader bad_crc = good;
  bad_crc.set_crc32c(good.crc32c() + 1);
  EXPECT_EQ(Publish(bad_crc, bytes).error_code(), grpc::StatusCode::DATA_LOSS);
  std::string corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 0x40;
  EXPECT_EQ(Publish(Header(owner, t.tensor_id(), 1, corrupt), corrupt).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Not the owner; unknown tensor; unknown member.
  EXPECT_EQ(Publish(Header(other, t.tensor_id(), 1, bytes), bytes).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Publish(Header(owner, 99, 1, bytes), bytes).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Publish(Header("nobody", t.tensor_id(), 1, bytes), bytes).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Nothing above was accepted; a good publication still is.
  ASSERT_TRUE(Publish(good, bytes, 100).ok());
  // The same version again is not above the last one.
  EXPECT_EQ(Publish(good, bytes).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(CoordinatorServiceTest, BadRequestsGetTheirCodes) {
  gift::v1::JoinResponse a = Join("a");
  gift::v1::TensorInfo t = Register("w", 8, 16);

  gift::v1::JoinRequest dup;
  dup.set_name("a");
  dup.set_role(gift::v1::MEMBER_ROLE_WORKER);
  gift::v1::JoinResponse join_response;
  EXPECT_EQ(stub_->Join(Context().get(), dup, &join_response).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);

  gift::v1::AckBasisRequest ack;
  ack.set_member_id(a.member_id());
  ack.set_tensor_id(12345);
  ack.set_version(1);
  gift::v1::AckBasisResponse ack_response;
  EXPECT_EQ(stub_->AckBasis(Context().get(), ack, &ack_response).error_code(),
            grpc::StatusCode::NOT_FOUND);  // unknown tensor
  ack.set_tensor_id(t.tensor_id());
  EXPECT_EQ(stub_->AckBasis(Context().get(), ack, &ack_response).error_code(),
            grpc::StatusCode::NOT_FOUND);  // unknown version

  gift::v1::SetPolicyRequest set;
  set.set_expected_version(41);
  gift::v1::Policy policy;
  EXPECT_EQ(stub_->SetPolicy(Context().get(), set, &policy).error_code(),
            grpc::StatusCode::ABORTED);
  set.set_expected_version(0);
  set.mutable_policy()->mutable_selection()->set_margin(3);
  grpc::Status invalid = stub_->SetPolicy(Context().get(), set, &policy);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(invalid.error_message(), HasSubstr("selection.margin = 3"));

  gift::v1::HeartbeatRequest hb;
  hb.set_member_id(a.member_id());
  hb.set_epoch(a.epoch() + 5);
  gift::v1::HeartbeatResponse hb_response;
  EXPECT_EQ(stub_->Heartbeat(Context().get(), hb, &hb_response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // an epoch from the future
  // The lease runs out (checked lazily on the next call): stale member.
  clock_.Advance(absl::Seconds(11));
  hb.set_epoch(a.epoch());
  grpc::Status expired = stub_->Heartbeat(Context().get(), hb, &hb_response);
  EXPECT_EQ(expired.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(expired.error_message(), HasSubstr("join again"));
  hb.set_member_id("m77");
  EXPECT_EQ(stub_->Heartbeat(Context().get(), hb, &hb_response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The name is free again after the expiry.
  EXPECT_EQ(stub_->Join(Context().get(), dup, &join_response).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(join_response.epoch(), a.epoch() + 2);  // expiry, then the join
}

TEST_F(CoordinatorServiceTest, WatchStreamsEveryNewRevisionAndEndsOnShutdown) {
  gift::v1::WatchRequest request;
  grpc::ClientContext context;
  auto reader = stub_->Watch(&context, request);
  gift::v1::ClusterState state;
  ASSERT_TRUE(reader->Read(&state));
  const uint64_t first = state.revision();
  EXPECT_EQ(state.epoch(), 0u);

  Join("a");
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_GT(state.revision(), first);
  EXPECT_EQ(state.epoch(), 1u);
  EXPECT_EQ(state.workers_size(), 1);

  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_transform()->set_rank(7);
  gift::v1::Policy policy;
  ASSERT_TRUE(stub_->SetPolicy(Context().get(), set, &policy).ok());
  // Read until the policy change shows up (revisions may coalesce).
  while (state.policy().transform().rank() != 7) ASSERT_TRUE(reader->Read(&state));
  EXPECT_EQ(state.policy().version(), policy.version());

  service_->Shutdown();
  while (reader->Read(&state)) {
  }
  grpc::Status end = reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE);
  // Later calls are refused too.
  gift::v1::GetStatusRequest status_request;
  gift::v1::StatusResponse status;
  EXPECT_EQ(stub_->GetStatus(Context().get(), status_request, &status).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CoordinatorServiceTest, WatchAfterRevisionWaitsAndCancelledWatchersGoAway) {
  const uint64_t now = state_->revision();
  gift::v1::WatchRequest request;
  request.set_after_revision(now);
  auto context = std::make_unique<grpc::ClientContext>();
  auto reader = stub_->Watch(context.get(), request);
  Join("a");
  gift::v1::ClusterState state;
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_GT(state.revision(), now);  // the current one was skipped
  EXPECT_EQ(state.workers_size(), 1);

  // Many watchers that cancel must not disturb the others or the server.
  for (int i = 0; i < 8; ++i) {
    grpc::ClientContext c;
    auto r = stub_->Watch(&c, gift::v1::WatchRequest());
    ASSERT_TRUE(r->Read(&state));
    c.TryCancel();
    while (r->Read(&state)) {
    }
    EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  Join("b");
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_EQ(state.workers_size(), 2);
  context->TryCancel();
  while (reader->Read(&state)) {
  }
  reader->Finish();
}

TEST_F(CoordinatorServiceTest, ConcurrentMembersAndWatchers) {
  constexpr int kWorkers = 8, kWatchers = 4, kSteps = 20;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> watchers;
  std::atomic<int> snapshots{0};
  for (int i = 0; i < kWatchers; ++i) {
    grpc::ClientContext* context = contexts.emplace_back(new grpc::ClientContext()).get();
    watchers.emplace_back([&, context] {
      auto reader = stub_->Watch(context, gift::v1::WatchRequest());
      gift::v1::ClusterState state;
      uint64_t last = 0;
      while (reader->Read(&state)) {
        EXPECT_GT(state.revision(), last);  // strictly newer, never repeated
        last = state.revision();
        ++snapshots;
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
    });
  }
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      gift::v1::JoinResponse joined = Join(absl::StrCat("worker-", w));
      for (int step = 1; step <= kSteps; ++step) {
        gift::v1::HeartbeatRequest hb;
        hb.set_member_id(joined.member_id());
        hb.set_last_step(step);
        gift::v1::HeartbeatResponse response;
        EXPECT_TRUE(stub_->Heartbeat(Context().get(), hb, &response).ok());
      }
      gift::v1::LeaveRequest leave;
      leave.set_member_id(joined.member_id());
      gift::v1::LeaveResponse response;
      EXPECT_TRUE(stub_->Leave(Context().get(), leave, &response).ok());
    });
  }
  for (std::thread& t : workers) t.join();
  std::shared_ptr<const gift::v1::ClusterState> final_state = state_->Snapshot();
  EXPECT_EQ(final_state->epoch(), 2u * kWorkers);
  EXPECT_EQ(final_state->workers_size(), 0);
  EXPECT_EQ(final_state->frozen_through_step(), kSteps + 8u);
  service_->Shutdown();
  for (std::thread& t : watchers) t.join();
  EXPECT_GE(snapshots.load(), kWatchers);
}

}  // namespace
}  // namespace gift::coordinator
