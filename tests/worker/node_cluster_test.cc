// Node-local aggregation (Policy.hierarchy NODE, docs/design.md section
// 6.7) end to end, as real processes on loopback: gift-coordinator, two
// gift-server shards and four gift-worker daemons on two emulated nodes
// (--node node-a for workers 0 and 1, node-b for 2 and 3; tools/gift-cluster
// LocalCluster). Every rank pushes a distinct power of two, so the FP32
// average shows exactly which ranks were counted, and how often.
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 4;
constexpr int kServers = 2;
const std::vector<std::string> kNodes = {"node-a", "node-a", "node-b", "node-b"};

const std::vector<client::TensorSpec>& Specs() {
  static const auto* specs = new std::vector<client::TensorSpec>{
      {"layers.0.attn.q.weight", {96, 64}},
      {"layers.0.mlp.up.weight", {160, 64}},
      {"layers.0.norm.weight", {1000}}};
  return *specs;
}

// Rank r's gradient: 2^r times a power of two per element (exact in FP32
// however the ranks are summed).
float Value(uint32_t rank, size_t k) {
  return std::ldexp(1.0f, static_cast<int>(rank)) * std::ldexp(1.0f, -static_cast<int>(k % 4));
}

class NodeClusterTest : public test::ClusterFixture<> {
 protected:
  tools::LocalClusterOptions Options() override {
    tools::LocalClusterOptions options = test::ShortLeaseOptions(kServers, kWorkers);
    options.worker_nodes = kNodes;
    // Several chunks per tensor, so that both members of a node lead some.
    options.coordinator_args = {"--chunk-bytes", "16384"};
    return options;
  }

  NodeClusterTest() { at_tear_down_ = AtTearDown::kStopAnyhow; }  // a test kills a worker

  // The policy with FP32 codecs, no basis, and `hierarchy`.
  void SetHierarchy(gift::v1::Hierarchy hierarchy) {
    auto current = coordinator_->GetPolicy();
    ASSERT_TRUE(current.ok()) << current.status();
    gift::v1::Policy policy = *current;
    const codec::CodecSpec fp32{.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
    *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(fp32);
    *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(fp32);
    policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);  // no GIFT basis
    policy.set_hierarchy(hierarchy);
    SetPolicy(policy);
  }

  // Worker w's gradients: Value(its rank at registration).
  void Fill(int w) {
    for (client::SharedTensor& t : tensors_[w]) {
      for (size_t k = 0; k < t.size(); ++k) t.data()[k] = Value(clients_[w]->rank(), k);
    }
  }

  // Bytes the workers of each node sent to the servers in `results` (by
  // worker), and the mean step time.
  static std::map<std::string, uint64_t> BytesByNode(
      const std::vector<absl::StatusOr<client::PushPullResult>>& results) {
    std::map<std::string, uint64_t> out;
    for (size_t w = 0; w < results.size(); ++w) {
      if (!results[w].ok()) continue;
      for (const client::TensorResult& t : results[w]->tensors) out[kNodes[w]] += t.bytes_sent;
    }
    return out;
  }

  std::vector<absl::StatusOr<client::PushPullResult>> Step(uint64_t step,
                                                           const std::vector<int>& workers) {
    std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
    for (int w : workers) calls.push_back(clients_[w]->PushPullAsync(step));
    std::vector<absl::StatusOr<client::PushPullResult>> out;
    for (auto& c : calls) out.push_back(c.get());
    return out;
  }

  // Every worker of `workers` holds the same bits, equal to `expected(k)`.
  void ExpectResult(const std::vector<int>& workers, const std::function<float(size_t)>& expected) {
    for (size_t i = 0; i < Specs().size(); ++i) {
      const client::SharedTensor& first = tensors_[workers[0]][i];
      for (int w : workers) {
        const client::SharedTensor& t = tensors_[w][i];
        ASSERT_EQ(std::memcmp(t.data(), first.data(), t.size() * sizeof(float)), 0)
            << "worker " << w << " tensor " << i << " differs from worker " << workers[0];
      }
      for (size_t k = 0; k < first.size(); ++k) {
        ASSERT_EQ(first.data()[k], expected(k)) << "tensor " << i << " element " << k;
      }
    }
  }
};

// 15 = 1 + 2 + 4 + 8: every rank once.
float AllFour(size_t k) { return 15.0f * std::ldexp(1.0f, -static_cast<int>(k % 4)) * 0.25f; }

TEST_F(NodeClusterTest, ExactAverageIdenticalBitsAndNodeBytesCutByTheGroupSize) {
  SetHierarchy(gift::v1::HIERARCHY_NONE);
  Register(Specs());
  const std::vector<int> all = {0, 1, 2, 3};
  constexpr int kSteps = 4;
  std::map<std::string, uint64_t> none_bytes, node_bytes;
  double none_seconds = 0, node_seconds = 0;
  uint64_t step = 0;
  for (int s = 0; s < kSteps; ++s, ++step) {
    for (int w : all) Fill(w);
    auto results = Step(step, all);
    for (auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.status() << Logs();
      none_seconds += r->seconds / kWorkers;
    }
    ExpectResult(all, AllFour);
    for (const auto& [node, bytes] : BytesByNode(results)) none_bytes[node] += bytes;
  }
  SetHierarchy(gift::v1::HIERARCHY_NODE);  // a new epoch; the ranks stay
  for (int s = 0; s < kSteps; ++s, ++step) {
    for (int w : all) Fill(w);
    auto results = Step(step, all);
    for (auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.status() << Logs();
      EXPECT_EQ(r->world_size, static_cast<uint32_t>(kWorkers));
      node_seconds += r->seconds / kWorkers;
    }
    ExpectResult(all, AllFour);
    for (const auto& [node, bytes] : BytesByNode(results)) node_bytes[node] += bytes;
  }
  // Each node's leaders push one FP32 sum per chunk instead of one chunk per
  // member: half the bytes (each worker's per-tensor shares are rounded, at
  // most 1 byte off per tensor and step).
  const uint64_t slack = Specs().size() * kWorkers * kSteps;
  for (const std::string node : {"node-a", "node-b"}) {
    ASSERT_GT(node_bytes[node], 0u);
    EXPECT_NEAR(static_cast<double>(none_bytes[node]), 2.0 * node_bytes[node], 2.0 * slack)
        << node;
    std::cout << "bytes per step leaving " << node << ": hierarchy none "
              << none_bytes[node] / kSteps << ", node " << node_bytes[node] / kSteps
              << " (ratio " << static_cast<double>(none_bytes[node]) / node_bytes[node] << ")\n";
  }
  std::cout << "mean step seconds: hierarchy none " << none_seconds / kSteps << ", node "
            << node_seconds / kSteps << " (node/none "
            << node_seconds / none_seconds << ")\n";
}

TEST_F(NodeClusterTest, AMemberKilledMidStepRetriesTheStepCountingEachRankOnce) {
  SetHierarchy(gift::v1::HIERARCHY_NODE);
  Register(Specs());
  const std::vector<int> all = {0, 1, 2, 3};
  for (int w : all) Fill(w);
  auto first = Step(0, all);
  for (auto& r : first) ASSERT_TRUE(r.ok()) << r.status() << Logs();
  ExpectResult(all, AllFour);
  const uint64_t epoch = first[0]->epoch;

  // Step 1: workers 0, 1 (node-a) and 2 start; worker 3 holds back, so the
  // step cannot complete; worker 1 dies in it (SIGKILL).
  for (int w : all) Fill(w);
  std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
  calls.push_back(clients_[0]->PushPullAsync(1));
  auto doomed = clients_[1]->PushPullAsync(1);
  calls.push_back(clients_[2]->PushPullAsync(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(cluster_->KillWorker(1).ok());
  // Worker 3 joins the step once the coordinator evicted worker 1 (a new
  // epoch, whose start aborted the step's partial sums at the servers):
  // had it joined before, the chunks whose node sums already held worker 1
  // would have completed in the old epoch, over all four ranks, as they
  // would without node groups.
  control::CoordinatorClient coordinator(
      control::CoordinatorClient::MakeChannel(cluster_->coordinator_address()),
      absl::Seconds(30));
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (true) {
    auto status = coordinator.GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    if (status->state().epoch() > epoch) break;
    ASSERT_LT(absl::Now(), give_up) << "worker 1 was not evicted";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // ... and worker 3 works in that epoch: its step must not open under the
  // old one, which the coordinator's news may not have reached yet (a
  // server that is still behind holds its pushes until it catches up).
  while (true) {
    auto info = clients_[3]->Info();
    ASSERT_TRUE(info.ok()) << info.status();
    if (info->epoch() > epoch) break;
    ASSERT_LT(absl::Now(), give_up) << "worker 3 did not see the new epoch";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  calls.push_back(clients_[3]->PushPullAsync(1));
  const std::vector<int> survivors = {0, 2, 3};
  std::vector<absl::StatusOr<client::PushPullResult>> results;
  for (auto& c : calls) results.push_back(c.get());
  std::string statuses;
  for (size_t i = 0; i < results.size(); ++i) {
    absl::StrAppend(&statuses, "worker ", survivors[i], ": ", results[i].status().ToString(), "\n");
  }
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << statuses << Logs();
    EXPECT_GT(r->epoch, epoch);  // retried in the epoch without worker 1
    EXPECT_EQ(r->world_size, 3u);
  }
  // Each survivor exactly once, worker 1 never: its partial of the old
  // epoch was dropped with the epoch.
  float sum_scale = 0;
  for (int w : survivors) sum_scale += std::ldexp(1.0f, static_cast<int>(clients_[w]->rank()));
  ExpectResult(survivors, [&](size_t k) {
    return sum_scale * std::ldexp(1.0f, -static_cast<int>(k % 4)) * (1.0f / 3.0f);
  });
  (void)doomed.wait_for(std::chrono::seconds(5));
}

}  // namespace
}  // namespace gift::worker
