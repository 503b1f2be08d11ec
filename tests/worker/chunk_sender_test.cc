// The sending side of the engine on its own (issue 50: units with no test
// file of their own), between two in-process transports. ChunkSender: a
// push leaves with its header (kind, epoch, step, tensor, version, chunk,
// rank, world) and the chunk encoded in the tensor's push codec; the node
// member's chunk goes in FP32; every send is tracked by the ResultInbox until
// it ends; connections are cached, an unreachable server is named, and a send
// to a failed peer fails naming the server. The two routes over it:
// ServerRoute pushes each chunk to its server; NodeLeaderRoute sends a chunk
// another member leads to it in FP32, and pushes the group's sum of a chunk
// it leads once the members' contributions are in.
#include "worker/engine/chunk_sender.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/node_route.h"
#include "worker/engine/server_route.h"
#include "worker/engine/tensor_buffer_cache.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

class ChunkSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = transport::CreateInprocTransport(
        &hub_, {.on_receive = [this](transport::Message m) {
          absl::MutexLock lock(&mu_);
          received_.push_back(std::move(m));
        }});
    ASSERT_TRUE(server.ok());
    server_ = *std::move(server);
    auto worker = transport::CreateInprocTransport(
        &hub_, {.on_receive = [this](transport::Message m) { inbox_.OnMessage(std::move(m)); },
                .on_peer_failure = [this](transport::PeerId p,
                                          const absl::Status& s) { inbox_.OnPeerFailure(p, s); }});
    ASSERT_TRUE(worker.ok());
    worker_ = *std::move(worker);
    sender_ = std::make_unique<ChunkSender>(*worker_, inbox_, codec::CodecOptions{});
    cache_ = std::make_unique<TensorBufferCache>(*worker_, inbox_, codec::CodecOptions{}, nullptr,
                                                 /*evict_after_runs=*/4);
    for (size_t i = 0; i < gradient_.size(); ++i) gradient_[i] = 0.01f * static_cast<float>(i);
    plan_.epoch = 3;
    plan_.step = 11;
    plan_.rank = 1;
    plan_.world_size = 2;
    tensor_.tensor_id = 9;
    tensor_.basis_version = 4;
    tensor_.rows = 8;
    tensor_.cols = 32;
    tensor_.data = gradient_.data();
    tensor_.push_spec = codec::ParseCodecSpec("e4m3/block32").value();
    tensor_.chunks = testing::Routes({.id = 9, .rows = 8, .cols = 32, .rows_per_chunk = 4,
                                      .transformed = false},
                                     {server_->address()});
    inbox_.Open(plan_.epoch, plan_.step, /*run=*/1, nullptr, /*node_step=*/false);
  }
  void TearDown() override {
    inbox_.AwaitSends(absl::Seconds(5));
    cache_->ReleaseRegions();
  }

  TensorBuffers* Buffers() {
    auto buffers = cache_->For(tensor_, testing::ChunkShapes(tensor_), 1);
    EXPECT_TRUE(buffers.ok()) << buffers.status();
    return buffers.value_or(nullptr);
  }

  std::vector<transport::Message> AwaitReceived(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return received_.size() >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5)));
    return std::move(received_);
  }

  std::vector<float> gradient_ = std::vector<float>(8 * 32);
  transport::InprocHub hub_;
  absl::Mutex mu_;
  std::vector<transport::Message> received_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<transport::Transport> server_;
  ResultInbox inbox_;
  std::unique_ptr<transport::Transport> worker_;
  std::unique_ptr<ChunkSender> sender_;
  std::unique_ptr<TensorBufferCache> cache_;
  StepPlan plan_;
  TensorStep tensor_;
};

TEST_F(ChunkSenderTest, APushCarriesItsHeaderAndTheChunkInThePushCodec) {
  auto peer = sender_->ConnectToServer(server_->address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*sender_->ConnectToServer(server_->address()), *peer);  // cached
  TensorBuffers* buffers = Buffers();
  ASSERT_NE(buffers, nullptr);
  ASSERT_TRUE(buffers->stage().Prepare(gradient_.data()).ok());
  StepReport report;
  ChunkSlot& slot = buffers->chunks()[1];
  ASSERT_TRUE(sender_->PushChunk(plan_, tensor_, buffers->stage(), slot, *peer, 1, report).ok());
  EXPECT_EQ(report.bytes_pushed, slot.send.size());
  EXPECT_TRUE(inbox_.pushed());

  std::vector<transport::Message> got = AwaitReceived(1);
  ASSERT_EQ(got.size(), 1u);
  auto header = dataplane::ParseChunkHeader(got[0].header);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->kind, ChunkKind::kPush);
  EXPECT_EQ(header->epoch, 3u);
  EXPECT_EQ(header->step, 11u);
  EXPECT_EQ(header->tensor_id, 9u);
  EXPECT_EQ(header->basis_version, 4u);
  EXPECT_EQ(header->chunk_index, 1u);
  EXPECT_EQ(header->rank, 1u);
  EXPECT_EQ(header->world_size, 2u);
  // The payload is rows 4..7 encoded in E4M3 block-32: within its bound.
  auto payload = codec::ParsePayload(got[0].bytes());
  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(payload->shape, (std::vector<uint64_t>{4, 32}));
  std::vector<float> decoded(4 * 32);
  ASSERT_TRUE(codec::Decode(payload->view, decoded.data()).ok());
  for (size_t i = 0; i < decoded.size(); ++i) {
    const float x = gradient_[4 * 32 + i];
    EXPECT_NEAR(decoded[i], x, 0.07f * std::abs(x) + 1e-6f) << i;
  }
  inbox_.AwaitSends(absl::Seconds(5));
  EXPECT_TRUE(inbox_.Idle(*buffers));
}

TEST_F(ChunkSenderTest, ANodeMembersChunkTravelsInFp32FromAPayloadOfItsOwn) {
  auto peer = sender_->ConnectToNodeMate(server_->address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  TensorBuffers* buffers = Buffers();
  ASSERT_NE(buffers, nullptr);
  StepReport report;
  ASSERT_TRUE(sender_
                  ->SendToLeader(plan_, tensor_, gradient_.data(), buffers->chunks()[0], *peer, 1,
                                 report)
                  .ok());
  EXPECT_GT(report.node_bytes_sent, 4u * 32 * sizeof(float));
  EXPECT_EQ(report.bytes_pushed, 0u);
  EXPECT_FALSE(inbox_.pushed());  // not a push to a server
  std::vector<transport::Message> got = AwaitReceived(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(dataplane::ParseChunkHeader(got[0].header)->kind, ChunkKind::kNodeMember);
  auto payload = codec::ParsePayload(got[0].bytes());
  ASSERT_TRUE(payload.ok()) << payload.status();
  std::vector<float> decoded(4 * 32);
  ASSERT_TRUE(codec::Decode(payload->view, decoded.data()).ok());
  for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(decoded[i], gradient_[i]) << i;
}

TEST_F(ChunkSenderTest, AnUnreachableOrFailedServerIsNamed) {
  auto nowhere = sender_->ConnectToServer("inproc:999");
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(nowhere.status().message().find("inproc:999"), std::string::npos) << nowhere.status();
  // The server goes away: its connection is reported failed, and a push to
  // it fails naming it.
  const std::string address = server_->address();
  auto peer = sender_->ConnectToServer(address);
  ASSERT_TRUE(peer.ok());
  server_.reset();
  for (int i = 0; i < 500 && inbox_.peer_failures() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(inbox_.peer_failures(), 1u);
  TensorBuffers* buffers = Buffers();
  ASSERT_NE(buffers, nullptr);
  ASSERT_TRUE(buffers->stage().Prepare(gradient_.data()).ok());
  StepReport report;
  const absl::Status pushed =
      sender_->PushChunk(plan_, tensor_, buffers->stage(), buffers->chunks()[0], *peer, 1, report);
  EXPECT_EQ(pushed.code(), absl::StatusCode::kUnavailable) << pushed;
  EXPECT_NE(pushed.message().find(address), std::string::npos) << pushed;
  EXPECT_TRUE(inbox_.Idle(*buffers));  // the send that never started is not counted
  // Forgotten, the connection is made again (and refused: nobody is there).
  sender_->Forget(*peer);
  EXPECT_FALSE(sender_->ConnectToServer(address).ok());
}


// ---- the routes --------------------------------------------------------------

TEST_F(ChunkSenderTest, TheServerRoutePushesEachChunkToItsServer) {
  ServerRoute route(*sender_);
  StepPlan node_plan = plan_;
  node_plan.node = std::make_shared<NodeGroup>();
  EXPECT_EQ(route.Begin(node_plan).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(route.Begin(plan_).ok());
  plan_.tensors = {tensor_};
  TensorBuffers* buffers = Buffers();
  ASSERT_NE(buffers, nullptr);
  auto peer = route.Connect(plan_, tensor_, tensor_.chunks[1]);
  ASSERT_TRUE(peer.ok()) << peer.status();
  auto x = buffers->stage().Prepare(gradient_.data());
  ASSERT_TRUE(x.ok());
  const std::vector<TensorBuffers*> all = {buffers};
  const std::vector<std::vector<transport::PeerId>> peers = {{*peer, *peer}};
  StepReport report;
  ASSERT_TRUE(route.Send({.plan = plan_, .run = 1, .buffers = all, .peers = peers}, 0, 1, *x,
                         report)
                  .ok());
  std::vector<transport::Message> got = AwaitReceived(1);
  ASSERT_EQ(got.size(), 1u);
  auto header = dataplane::ParseChunkHeader(got[0].header);
  EXPECT_EQ(header->kind, ChunkKind::kPush);
  EXPECT_EQ(header->chunk_index, 1u);
}

// A node group of ranks 0 (this worker) and 1 (the other transport, which
// also stands for the chunks' server): tensor 9's chunk 0 is led by rank 1,
// chunk 1 by this worker.
TEST_F(ChunkSenderTest, TheNodeRouteSendsToTheLeaderAndPushesTheGroupsSum) {
  NodeLeaderRoute route(*sender_, inbox_, codec::CodecOptions{});
  auto group = std::make_shared<NodeGroup>();
  group->self = 0;
  group->ranks = {1, 2};
  group->addresses = {worker_->address(), server_->address()};
  plan_.rank = 0;
  plan_.node = group;
  EXPECT_EQ(route.Begin(plan_).code(), absl::StatusCode::kInvalidArgument);  // not a member
  group->ranks = {0, 1};
  ASSERT_EQ(group->LeaderOf(9, 0), 1u);
  ASSERT_EQ(group->LeaderOf(9, 1), 0u);
  ASSERT_TRUE(route.Begin(plan_).ok());
  plan_.tensors = {tensor_};
  TensorBuffers* buffers = Buffers();
  ASSERT_NE(buffers, nullptr);
  std::vector<std::vector<transport::PeerId>> peers(1);
  for (const ChunkRoute& c : tensor_.chunks) {
    auto peer = route.Connect(plan_, tensor_, c);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peers[0].push_back(*peer);
  }
  auto x = buffers->stage().Prepare(gradient_.data());
  ASSERT_TRUE(x.ok());
  const std::vector<TensorBuffers*> all = {buffers};
  const RunningStep step{.plan = plan_, .run = 1, .buffers = all, .peers = peers};
  StepReport report;
  ASSERT_TRUE(route.Send(step, 0, 0, *x, report).ok());  // to its leader, in FP32
  ASSERT_TRUE(route.Send(step, 0, 1, *x, report).ok());  // led here: waits for the sum
  std::vector<transport::Message> got = AwaitReceived(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(dataplane::ParseChunkHeader(got[0].header)->kind, ChunkKind::kNodeMember);
  EXPECT_EQ(report.bytes_pushed, 0u);

  // Rank 1's contribution to chunk 1 arrives: the sum goes to the server.
  std::vector<float> mate(4 * 32, 0.5f);
  const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
  const uint64_t dims[] = {4, 32};
  std::vector<uint8_t> payload(codec::PayloadSizeFor(fp32, dims).value());
  auto view = codec::StartPayload(fp32, dims, absl::MakeSpan(payload));
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(codec::Encode(mate.data(), *view).ok());
  codec::FinishPayload(absl::MakeSpan(payload));
  ChunkHeader from_mate = OwnChunkHeader(ChunkKind::kNodeMember, plan_, tensor_, 1);
  from_mate.rank = 1;
  transport::Message m;
  const auto header_bytes = dataplane::SerializeChunkHeader(from_mate);
  m.header.assign(header_bytes.begin(), header_bytes.end());
  m.payload = payload;
  inbox_.OnMessage(std::move(m));
  ASSERT_TRUE(route.Progress(step, report).ok());
  got = AwaitReceived(1);
  ASSERT_EQ(got.size(), 1u);
  auto header = dataplane::ParseChunkHeader(got[0].header);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->kind, ChunkKind::kNodePush);
  EXPECT_EQ(header->ranks_summed(), 2u);
  EXPECT_EQ(header->chunk_index, 1u);
  auto sum = codec::ParsePayload(got[0].bytes());
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::vector<float> decoded(4 * 32);
  ASSERT_TRUE(codec::Decode(sum->view, decoded.data()).ok());
  for (size_t i = 0; i < decoded.size(); ++i) {
    const float want = gradient_[4 * 32 + i] + 0.5f;
    EXPECT_NEAR(decoded[i], want, 0.07f * want) << i;
  }
  EXPECT_EQ(inbox_.stray_messages(), 0u);
}

}  // namespace
}  // namespace gift::worker
