// The shared harnesses themselves: the per-test temp dir lands under
// TEST_TMPDIR and is removed; the log-event waits read a real child's JSON
// lines; the in-process coordinator serves Join and stops serving when
// destroyed; plans follow a cluster state's shard map; a RecordingPeer
// records what a transport sends it.
#include <stdlib.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/codec/codec_spec.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "tests/testing/coordinator_server.h"
#include "tests/testing/log_events.h"
#include "tests/testing/recording_peer.h"
#include "tests/testing/server_process.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::test {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(HarnessTempDirTest, LandsUnderTestTmpdirAndIsRemoved) {
  const gift::TempDir parent = gift::TempDir::Create("gift-harness-parent").value();
  ASSERT_EQ(setenv("TEST_TMPDIR", parent.path().c_str(), 1), 0);
  std::string path;
  {
    const gift::TempDir dir = NewTempDir("gift-harness");
    path = dir.path();
    EXPECT_TRUE(absl::StartsWith(path, parent.path() + "/gift-harness-")) << path;
    EXPECT_TRUE(IsDirectory(path));
  }
  EXPECT_FALSE(IsDirectory(path));
  unsetenv("TEST_TMPDIR");
}

TEST(HarnessLogEventsTest, WaitsForEventsOfARealChild) {
  auto child = tools::Subprocess::Start(
      {"/bin/sh", "-c",
       "echo 'not json'; echo '{\"event\":\"joined\",\"epoch\":3,\"chunks\":1}';"
       "echo '{\"event\":\"serving\",\"epoch\":3,\"chunks\":2}';"
       "echo '{\"event\":\"metrics_listening\",\"address\":\"127.0.0.1:9\"}' >&2"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE(WaitForServing(**child, 3, 2).ok());
  EXPECT_EQ(EventField(**child, "metrics_listening", "address"), "127.0.0.1:9");
  EXPECT_EQ(EventField(**child, "metrics_listening", "port"), "");
  auto line = WaitForEvent(**child, "joined", {"\"chunks\":1"});
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, "\"epoch\":3")) << *line;
  // No such line, and the child's output has ended.
  EXPECT_EQ(WaitForServing(**child, 4).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*child)->WaitForExit(absl::Seconds(30)).value_or(-1), 0);
}

TEST(HarnessServerProcessTest, PassesItsFlags) {
  auto p = StartServerProcess({.binary = "/bin/echo",
                               .coordinator = "127.0.0.1:1",
                               .name = "shard-7",
                               .threads = 3,
                               .extra_args = {"--metrics-listen", ""}});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ((*p)->WaitForExit(absl::Seconds(30)).value_or(-1), 0);
  EXPECT_EQ((*p)->stdout_text(),
            "--coordinator 127.0.0.1:1 --name shard-7 --threads 3 --metrics-listen \n");
}

TEST(HarnessCoordinatorServerTest, ServesJoinUntilDestroyed) {
  auto server = CoordinatorServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto joined = JoinOverRpc(*(*server)->stub(), "w0", gift::v1::MEMBER_ROLE_WORKER);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_FALSE(joined->member_id().empty());
  EXPECT_EQ((*server)->state()->Snapshot()->workers_size(), 1);
  EXPECT_EQ(JoinOverRpc(*(*server)->stub(), "w0", gift::v1::MEMBER_ROLE_WORKER).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto other = gift::v1::Coordinator::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  server->reset();
  EXPECT_EQ(JoinOverRpc(*other, "w1", gift::v1::MEMBER_ROLE_WORKER).status().code(),
            absl::StatusCode::kUnavailable);
}

gift::v1::ClusterState TwoServerState() {
  gift::v1::ClusterState s;
  s.set_epoch(7);
  for (int w = 0; w < 2; ++w) s.add_workers()->set_rank(w);
  for (int r = 0; r < 2; ++r) {
    gift::v1::Member* m = s.add_servers();
    m->set_rank(r);
    m->set_data_address(r == 0 ? "server-a" : "server-b");
  }
  gift::v1::TensorInfo* t = s.add_tensors();
  t->set_tensor_id(5);
  t->add_shape(4);
  t->add_shape(8);
  t->set_num_elements(32);
  s.mutable_shard_map()->set_epoch(7);
  for (uint32_t i = 0; i < 2; ++i) {
    gift::v1::Chunk* c = s.mutable_shard_map()->add_chunks();
    c->set_tensor_id(5);
    c->set_index(i);
    c->set_offset(16 * i);
    c->set_num_elements(16);
    c->set_server_rank(1 - i);
  }
  return s;
}

TEST(HarnessStatePlansTest, PlansFollowTheShardMap) {
  const gift::v1::ClusterState s = TwoServerState();
  EXPECT_TRUE(ClusterReady(2, 2, 1)(s));
  EXPECT_FALSE(ClusterReady(3, 2, 1)(s));
  gift::v1::ClusterState stale = s;
  stale.mutable_shard_map()->set_epoch(6);
  EXPECT_FALSE(ClusterReady(2, 2, 1)(stale));
  EXPECT_EQ(ServerAddresses(s), (std::vector<std::string>{"server-a", "server-b"}));

  const codec::CodecSpec push = codec::ParseCodecSpec("fp32").value();
  std::vector<std::vector<float>> buffers, again, other_rank;
  const worker::StepPlan plan = PlanFromState(s, 2, 1, 2, push, &buffers);
  EXPECT_EQ(plan.epoch, 7u);
  EXPECT_EQ(plan.step, 2u);
  EXPECT_EQ(plan.rank, 1u);
  EXPECT_EQ(plan.world_size, 2u);
  ASSERT_EQ(plan.tensors.size(), 1u);
  ASSERT_EQ(buffers.size(), 1u);
  const worker::TensorStep& t = plan.tensors[0];
  EXPECT_EQ(t.tensor_id, 5u);
  EXPECT_EQ(t.rows, 4u);
  EXPECT_EQ(t.cols, 8u);
  EXPECT_EQ(t.data, buffers[0].data());
  ASSERT_EQ(t.chunks.size(), 2u);
  EXPECT_EQ(t.chunks[0].server, "server-b");
  EXPECT_EQ(t.chunks[1].server, "server-a");
  EXPECT_EQ(t.chunks[1].offset, 16u);
  PlanFromState(s, 2, 1, 2, push, &again);
  PlanFromState(s, 2, 0, 2, push, &other_rank);
  EXPECT_EQ(again, buffers);
  EXPECT_NE(other_rank, buffers);
}

TEST(HarnessRecordingPeerTest, RecordsWhatItIsSent) {
  transport::InprocHub hub;
  auto sender = transport::CreateInprocTransport(&hub, {.on_receive = [](transport::Message) {}});
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto peer = RecordingPeer::Connect(
      [&](transport::TransportHandlers h) {
        return transport::CreateInprocTransport(&hub, std::move(h));
      },
      (*sender)->address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  auto to_peer = (*sender)->Connect((*peer)->transport->address());
  ASSERT_TRUE(to_peer.ok()) << to_peer.status();
  const std::vector<uint8_t> header = {1, 2, 3}, payload = {4, 5};
  ASSERT_TRUE((*sender)->Send(*to_peer, header, payload, [](const absl::Status&) {}).ok());
  ASSERT_TRUE((*peer)->WaitFor(1));
  const std::vector<transport::Message> got = (*peer)->Received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header, header);
  EXPECT_EQ(got[0].payload, payload);
}

}  // namespace
}  // namespace gift::test
