// The push-pull engine's data-plane authentication (push_pull_engine.h,
// docs/design.md section 8.2) against a fake server on the in-process
// transport: pushes leave sealed with the worker's key of the epoch; results
// and aborts that are unsealed, sealed with another key or by a signer the
// worker has no key for are dropped and counted, never written into the
// gradient, and the real, sealed results complete the step. In a node
// group, the members' chunks are sealed with the node's key.
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;
using dataplane::MacKey;

MacKey Key(uint8_t seed) {
  MacKey k;
  k.fill(seed);
  return k;
}

constexpr uint64_t kCols = 256;

// A one-row FP32 payload of `value`s.
std::vector<uint8_t> Fp32Payload(float value) {
  std::vector<float> values(kCols, value);
  auto t = codec::EncodedTensor::Create(codec::ParseCodecSpec("fp32").value(), 1, kCols).value();
  EXPECT_TRUE(codec::Encode(values.data(), t.mutable_view()).ok());
  const uint64_t dims[] = {1, kCols};
  return codec::SerializePayload(t.view(), dims).value();
}

// A fake server on the in-process transport: records what it receives.
struct FakeServer {
  FakeServer() {
    auto t = transport::CreateInprocTransport(&hub, {.on_receive = [this](transport::Message m) {
      absl::MutexLock lock(&mu);
      pushes.push_back(std::move(m));
    }});
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) transport = *std::move(t);
  }
  // Waits (10 s at most) until `n` messages arrived.
  bool AwaitPushes(size_t n) {
    absl::MutexLock lock(&mu);
    auto arrived = [&] { return pushes.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10));
  }

  transport::InprocHub hub;  // the engines' too
  absl::Mutex mu;
  std::vector<transport::Message> pushes ABSL_GUARDED_BY(mu);
  std::unique_ptr<transport::Transport> transport;
};

TEST(PushPullEngineAuth, OnlyResultsSealedByTheServerCount) {
  constexpr uint64_t kEpoch = 3;
  const MacKey worker_key = dataplane::DeriveEpochKey(Key(1), kEpoch).value();
  const MacKey server_key = dataplane::DeriveEpochKey(Key(100), kEpoch).value();
  FakeServer fake;
  ASSERT_NE(fake.transport, nullptr);
  transport::Transport* server = fake.transport.get();
  auto engine = testing::InprocEngine(&fake.hub, absl::Seconds(10));
  ASSERT_TRUE(engine.ok());
  auto to_engine = server->Connect((*engine)->address());
  ASSERT_TRUE(to_engine.ok());

  std::vector<std::vector<uint8_t>> sent;  // kept until the end
  sent.reserve(16);
  auto result_payload = [&](float value) {
    sent.push_back(Fp32Payload(value));
    return absl::Span<const uint8_t>(sent.back());
  };
  const ChunkHeader result{.kind = ChunkKind::kResult,
                           .epoch = kEpoch,
                           .step = 1,
                           .tensor_id = 5,
                           .chunk_index = 0,
                           .rank = 1,
                           .world_size = 1};
  std::vector<std::array<uint8_t, dataplane::kSealedChunkHeaderBytes>> headers;
  headers.reserve(16);
  auto send = [&](absl::Span<const uint8_t> header, absl::Span<const uint8_t> payload) {
    ASSERT_TRUE(server->Send(*to_engine, header, payload, [](const absl::Status&) {}).ok());
  };

  std::vector<float> grad(kCols, 0.5f);
  auto keys = std::make_shared<dataplane::EpochKeys>();
  keys->epoch = kEpoch;
  keys->signer = 0;
  keys->own = worker_key;
  keys->peers = {server_key};
  StepPlan plan{
      .epoch = kEpoch,
      .step = 1,
      .rank = 0,
      .world_size = 1,
      .tensors = {{.tensor_id = 5,
                   .rows = 1,
                   .cols = kCols,
                   .data = grad.data(),
                   .chunks = {{.index = 0, .num_elements = kCols, .server = server->address()}},
                   .push_spec = codec::ParseCodecSpec("fp32").value()}},
      .keys = keys};
  absl::StatusOr<StepReport> report = absl::UnknownError("not run");
  std::thread run([&] { report = (*engine)->Run(plan); });
  ASSERT_TRUE(fake.AwaitPushes(1));
  {
    absl::MutexLock lock(&fake.mu);
    // The push is sealed by rank 0 with the worker's key of the epoch.
    const transport::Message& m = fake.pushes[0];
    auto h = dataplane::ParseChunkHeader(m.header);
    ASSERT_TRUE(h.ok()) << h.status();
    dataplane::EpochKeys server_side{.epoch = kEpoch, .own = server_key, .peers = {worker_key}};
    EXPECT_EQ(dataplane::CheckChunk(server_side, *h, m.header, m.payload), std::nullopt);
  }
  // Forgeries first: unsealed, another key, a signer without a key, an
  // unsealed abort; then the server's real result.
  send(dataplane::SerializeChunkHeader(result), result_payload(99.0f));
  headers.push_back(dataplane::SealChunk(result, 0, result_payload(98.0f), Key(7)).value());
  send(headers.back(), sent.back());
  headers.push_back(dataplane::SealChunk(result, 4, result_payload(97.0f), server_key).value());
  send(headers.back(), sent.back());
  ChunkHeader abort = result;
  abort.kind = ChunkKind::kAbort;
  abort.status_code = static_cast<uint32_t>(absl::StatusCode::kAborted);
  const std::string why = "forged";
  send(dataplane::SerializeChunkHeader(abort),
       absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(why.data()), why.size()));
  headers.push_back(dataplane::SealChunk(result, 0, result_payload(2.5f), server_key).value());
  send(headers.back(), sent.back());
  run.join();
  ASSERT_TRUE(report.ok()) << report.status();
  for (float x : grad) ASSERT_EQ(x, 2.5f);
  auto failures = (*engine)->inbox().auth_failures();
  EXPECT_EQ(failures["missing"], 2u);
  EXPECT_EQ(failures["bad_mac"], 1u);
  EXPECT_EQ(failures["unknown_key"], 1u);
  EXPECT_EQ(failures["wrong_signer"], 0u);
  engine->reset();
}

// Node-local aggregation with authentication: a leader sums only the
// members' chunks sealed with the node's key (unsealed or other-key ones
// are dropped and counted), and pushes the group's sum sealed with its own
// key, which the server checks as any push.
TEST(PushPullEngineAuth, ALeaderSumsOnlyMemberChunksSealedWithTheNodesKey) {
  constexpr uint64_t kEpoch = 4, kTensor = 4;  // chunk 0 led by rank 0
  const MacKey worker_key = dataplane::DeriveEpochKey(Key(1), kEpoch).value();
  const MacKey server_key = dataplane::DeriveEpochKey(Key(100), kEpoch).value();
  const MacKey node_key = dataplane::DeriveEpochKey(Key(50), kEpoch).value();
  FakeServer fake;
  ASSERT_NE(fake.transport, nullptr);
  transport::Transport* server = fake.transport.get();
  auto member =
      transport::CreateInprocTransport(&fake.hub, {.on_receive = [](transport::Message) {}});
  ASSERT_TRUE(member.ok());
  auto engine = testing::InprocEngine(&fake.hub, absl::Seconds(10));
  ASSERT_TRUE(engine.ok());

  auto keys = std::make_shared<dataplane::EpochKeys>();
  keys->epoch = kEpoch;
  keys->own = worker_key;
  keys->peers = {server_key};
  keys->node = node_key;
  auto group = std::make_shared<NodeGroup>(NodeGroup{
      .self = 0, .ranks = {0, 1}, .addresses = {(*engine)->address(), (*member)->address()}});
  std::vector<float> grad(kCols, 0.5f);
  StepPlan plan{
      .epoch = kEpoch,
      .step = 1,
      .rank = 0,
      .world_size = 2,
      .tensors = {{.tensor_id = kTensor,
                   .rows = 1,
                   .cols = kCols,
                   .data = grad.data(),
                   .chunks = {{.index = 0, .num_elements = kCols, .server = server->address()}},
                   .push_spec = codec::ParseCodecSpec("fp32").value()}},
      .keys = keys,
      .node = group};
  absl::StatusOr<StepReport> report = absl::UnknownError("not run");
  std::thread run([&] { report = (*engine)->Run(plan); });

  // Rank 1's chunk: unsealed, sealed with another key, then with the node's.
  const ChunkHeader contribution{.kind = ChunkKind::kNodeMember,
                                 .epoch = kEpoch,
                                 .step = 1,
                                 .tensor_id = kTensor,
                                 .chunk_index = 0,
                                 .rank = 1,
                                 .world_size = 2};
  const std::vector<uint8_t> forged = Fp32Payload(100.0f), real = Fp32Payload(1.5f);
  const auto forged_header = dataplane::SealChunk(contribution, 1, forged, Key(9)).value();
  const auto real_header = dataplane::SealChunk(contribution, 1, real, node_key).value();
  auto to_leader = (*member)->Connect((*engine)->address());
  ASSERT_TRUE(to_leader.ok());
  for (const auto& [header, payload] :
       std::vector<std::pair<std::vector<uint8_t>, const std::vector<uint8_t>*>>{
           {[&] {
              const auto h = dataplane::SerializeChunkHeader(contribution);
              return std::vector<uint8_t>(h.begin(), h.end());
            }(),
            &forged},
           {{forged_header.begin(), forged_header.end()}, &forged},
           {{real_header.begin(), real_header.end()}, &real}}) {
    ASSERT_TRUE((*member)->Send(*to_leader, header, *payload, [](const absl::Status&) {}).ok());
  }

  // The group's sum reaches the server sealed by rank 0 with its own key.
  std::vector<float> sum(kCols);
  ASSERT_TRUE(fake.AwaitPushes(1));
  {
    absl::MutexLock lock(&fake.mu);
    const transport::Message& m = fake.pushes[0];
    auto h = dataplane::ParseChunkHeader(m.header);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->kind, ChunkKind::kNodePush);
    dataplane::EpochKeys server_side{.epoch = kEpoch, .own = server_key, .peers = {worker_key}};
    EXPECT_EQ(dataplane::CheckChunk(server_side, *h, m.header, m.payload), std::nullopt);
    auto parsed = codec::ParsePayload(m.payload);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ASSERT_TRUE(codec::Decode(parsed->view, sum.data()).ok());
  }
  for (float x : sum) ASSERT_EQ(x, 2.0f);  // 0.5 + 1.5: the forgeries are not in it

  ChunkHeader result = contribution;
  result.kind = ChunkKind::kResult;
  result.rank = 0;
  const std::vector<uint8_t> average = Fp32Payload(1.0f);
  const auto result_header = dataplane::SealChunk(result, 0, average, server_key).value();
  auto to_engine = server->Connect((*engine)->address());
  ASSERT_TRUE(to_engine.ok());
  ASSERT_TRUE(server->Send(*to_engine, result_header, average, [](const absl::Status&) {}).ok());
  run.join();
  ASSERT_TRUE(report.ok()) << report.status();
  for (float x : grad) ASSERT_EQ(x, 1.0f);
  auto failures = (*engine)->inbox().auth_failures();
  EXPECT_EQ(failures["missing"], 1u);
  EXPECT_EQ(failures["bad_mac"], 1u);
  engine->reset();
}

}  // namespace
}  // namespace gift::worker
