// The step-time model of `gift-bench model` (bench/step_model.h) on cases
// computed by hand.
#include "bench/step_model.h"

#include <vector>

#include "gtest/gtest.h"

namespace gift::bench {
namespace {

constexpr double kTol = 1e-9;

// 1e6 elements, 1 GB/s links: FP32 bytes move in 4 ms per 1e6 elements.
ModelTotals MillionElements() { return {.elements = 1'000'000}; }

Cluster FourGpus() { return {.gpus = 4, .gpus_per_node = 1, .link_bps = 1e9}; }

TEST(StepModel, RingIsTwoPMinusOneOverPTimesBytes) {
  MethodConfig ring{.label = "fp32 ring", .method = Method::kRing, .bytes_per_element = 4};
  auto p = PredictStep(MillionElements(), FourGpus(), {}, {}, ring);
  ASSERT_TRUE(p.ok()) << p.status();
  // 2 * 3/4 * 4e6 B = 6e6 B at 1e9 B/s.
  EXPECT_NEAR(p->gpu_tx_bytes, 6e6, kTol);
  EXPECT_NEAR(p->network_s, 6e-3, kTol);
  EXPECT_NEAR(p->step_s, 6e-3, kTol);
  // NCCL's FP8 ring: 1 byte per element on every hop.
  ring.bytes_per_element = 1;
  p = PredictStep(MillionElements(), FourGpus(), {}, {}, ring);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->network_s, 1.5e-3, kTol);
}

TEST(StepModel, RingLatencyIsTwoPMinusOneHops) {
  Cluster c = FourGpus();
  c.link_latency_s = 1e-5;
  MethodConfig ring{.method = Method::kRing, .bytes_per_element = 4};
  auto p = PredictStep(MillionElements(), c, {}, {}, ring);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->network_s, 6e-3 + 6 * 1e-5, kTol);
}

MethodConfig Service(int servers, double push_b, double pull_b) {
  return {.label = "service",
          .method = Method::kService,
          .push_bytes_per_element = push_b,
          .pull_bytes_per_element = pull_b,
          .servers = servers,
          .server_bps = 1e9};
}

TEST(StepModel, ServicePushPullSumAndMax) {
  // P = 4 workers, S = 2 servers with the workers' link rate: each server
  // carries P/S = 2 shares, so the server NIC is the bottleneck.
  MethodConfig m = Service(2, 1, 2);
  auto p = PredictStep(MillionElements(), FourGpus(), {}, {}, m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->gpu_tx_bytes, 1e6, kTol);
  EXPECT_NEAR(p->gpu_rx_bytes, 2e6, kTol);
  EXPECT_NEAR(p->server_rx_bytes, 2e6, kTol);  // 4 * 1e6 * 1 / 2
  EXPECT_NEAR(p->server_tx_bytes, 4e6, kTol);
  EXPECT_NEAR(p->push_s, 2e-3, kTol);
  EXPECT_NEAR(p->pull_s, 4e-3, kTol);
  EXPECT_NEAR(p->network_s, 6e-3, kTol);  // overlap 0: the sum
  EXPECT_EQ(p->bottleneck, "server NIC");
  m.push_pull_overlap = 1;
  p = PredictStep(MillionElements(), FourGpus(), {}, {}, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->network_s, 4e-3, kTol);  // the max
  m.push_pull_overlap = 0.5;
  p = PredictStep(MillionElements(), FourGpus(), {}, {}, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->network_s, 5e-3, kTol);
  // Four servers: the worker's link is the bottleneck again.
  m = Service(4, 1, 2);
  p = PredictStep(MillionElements(), FourGpus(), {}, {}, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->network_s, 3e-3, kTol);
  EXPECT_EQ(p->bottleneck, "worker link");
}

TEST(StepModel, OpsAndTransform) {
  // Encode and decode at 4 GB/s of FP32: 1 ms each per 1e6 elements; a
  // 100 x 100 tensor at rank 64 costs 4 * 1e4 * 128 flops per direction.
  std::vector<ModelTensor2D> tensors = {{"w", 100, 100}, {"norm", 1, 100}};
  ModelTotals t = Totals(tensors, /*transform=*/true, /*rank=*/64);
  EXPECT_EQ(t.elements, 10100u);
  EXPECT_EQ(t.transformed_elements, 10000u);
  EXPECT_NEAR(t.transform_flops, 4.0 * 1e4 * 128, kTol);
  // Rank above a side's size is clipped to it.
  EXPECT_NEAR(Totals({{"w", 32, 100}}, true, 64).transform_flops, 4.0 * 3200 * (32 + 64), kTol);
  EXPECT_EQ(Totals(tensors, false, 64).transform_flops, 0);

  ModelTotals million = MillionElements();
  million.transform_flops = 2e9;  // 2 ms at 1 TFLOP/s per direction
  OpRates ops{.encode_bps = 4e9, .decode_bps = 4e9, .reduce_bps = 16e9,
              .server_encode_bps = 8e9, .transform_flops_per_s = 1e12};
  MethodConfig m = Service(4, 1, 1);
  m.encode = m.transform = true;
  auto p = PredictStep(million, FourGpus(), ops, {}, m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->worker_encode_s, 3e-3, kTol);
  EXPECT_NEAR(p->worker_decode_s, 3e-3, kTol);
  // Server: 4 pushes x 250k elements x 4 B at 16 GB/s + 1e6 B at 8 GB/s.
  EXPECT_NEAR(p->server_s, 0.25e-3 + 0.125e-3, kTol);
  // Ops in series with the network (1 + 1 ms): 2 + 6 + 0.375 ms.
  EXPECT_NEAR(p->step_s, 8.375e-3, kTol);
  // Fully overlapped with it: the ops' 6.375 ms dominate.
  Compute overlapped{.ops_overlap = 1};
  p = PredictStep(million, FourGpus(), ops, overlapped, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->step_s, 6.375e-3, kTol);
  // On the GPU: worker ops add to compute, the rest may hide behind backward.
  Compute gpu{.forward_s = 0.01, .backward_s = 0.02, .backward_overlap = 1,
              .ops_on_compute = true};
  p = PredictStep(million, FourGpus(), ops, gpu, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->compute_s, 0.036, kTol);
  EXPECT_NEAR(p->exposed_s, 0, kTol);
  EXPECT_NEAR(p->step_s, 0.036, kTol);
  // Contention doubles every worker op.
  ops.worker_contention = 2;
  p = PredictStep(million, FourGpus(), ops, {}, m);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->worker_encode_s, 6e-3, kTol);
}

TEST(StepModel, BackwardOverlapAndTail) {
  MethodConfig ring{.method = Method::kRing, .bytes_per_element = 4};
  // 6 ms of all-reduce; half of a 10 ms backward hides up to 5 ms.
  Compute c{.forward_s = 0.005, .backward_s = 0.01, .backward_overlap = 0.5};
  auto p = PredictStep(MillionElements(), FourGpus(), {}, c, ring);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->exposed_s, 1e-3, kTol);
  EXPECT_NEAR(p->step_s, 0.016, kTol);
  // A last bucket of half the gradient (2 MB of 4 MB) is never hidden: 3 ms.
  c.backward_overlap = 1;
  c.bucket_bytes = 2e6;
  p = PredictStep(MillionElements(), FourGpus(), {}, c, ring);
  ASSERT_TRUE(p.ok());
  EXPECT_NEAR(p->exposed_s, 3e-3, kTol);
}

TEST(StepModel, NodeLocalAggregation) {
  // 8 GPUs, 4 per node, NVLink 10 GB/s: FP32 reduce-scatter (3/4 * 4e6 B)
  // and all-gather of the 1-byte pull (3/4 * 1e6 B) = 3.75e6 B -> 0.375 ms.
  Cluster c{.gpus = 8, .gpus_per_node = 4, .link_bps = 1e9, .nvlink_bps = 1e10};
  MethodConfig m = Service(2, 1, 1);
  m.hierarchy = Hierarchy::kNode;
  auto p = PredictStep(MillionElements(), c, {}, {}, m);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->nvlink_bytes, 3.75e6, kTol);
  EXPECT_NEAR(p->intra_node_s, 0.375e-3, kTol);
  EXPECT_NEAR(p->gpu_tx_bytes, 0.25e6, kTol);     // a quarter of the gradient
  EXPECT_NEAR(p->server_rx_bytes, 2 * 1e6 / 2, kTol);  // 2 nodes push, 2 servers
  // push: max(0.25 ms link, 1 ms NIC); pull the same; sum.
  EXPECT_NEAR(p->network_s, 2e-3, kTol);
  EXPECT_NEAR(p->step_s, 2.375e-3, kTol);
  // One GPU per node is the flat service.
  c.gpus_per_node = 1;
  auto node = PredictStep(MillionElements(), c, {}, {}, m);
  m.hierarchy = Hierarchy::kNone;
  auto flat = PredictStep(MillionElements(), c, {}, {}, m);
  ASSERT_TRUE(node.ok() && flat.ok());
  EXPECT_NEAR(node->step_s, flat->step_s, kTol);
}

TEST(StepModel, ServerSizing) {
  // 8 workers at 1 GB/s, servers at 2 GB/s: 4 servers match the workers.
  Cluster c{.gpus = 8, .gpus_per_node = 1, .link_bps = 1e9};
  MethodConfig m = Service(1, 1, 1);
  m.server_bps = 2e9;
  auto s = SizeServers(MillionElements(), c, {}, {}, m, 0.01, 64);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->nic_bound, 4);
  EXPECT_EQ(s->for_target, 4);
  EXPECT_NEAR(s->step_at_nic_bound_s, 2e-3, kTol);
  // With a 50 % tolerance 3 servers do (2.67 ms <= 3 ms).
  s = SizeServers(MillionElements(), c, {}, {}, m, 0.5, 64);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->for_target, 3);
  // Never reached within the limit: nic_bound 0.
  s = SizeServers(MillionElements(), c, {}, {}, m, 0.01, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->nic_bound, 0);
}

TEST(StepModel, LlamaShapes) {
  // d 512, 2 layers, no vocab: what `gift-bench cluster --d-model 512
  // --layers 2` lists (18 tensors, ff = 1408).
  std::vector<ModelTensor2D> t = LlamaTensors(512, 2, 0, 2.75, 0);
  ASSERT_EQ(t.size(), 18u);
  EXPECT_EQ(t[4].rows, 1408u);
  EXPECT_EQ(Totals(t, false, 0).elements, 2u * (4 * 512 * 512 + 3 * 512 * 1408 + 2 * 512));
  // Layers from a parameter count: 4096 wide, 32000 vocab, ff 11008 -> 32
  // blocks for 6.74e9 parameters (Llama-7B).
  t = LlamaTensors(4096, 0, 6.74e9, 11008.0 / 4096, 32000);
  EXPECT_EQ(t.size(), 2u + 32 * 9);
}

TEST(StepModel, RejectsNonsense) {
  MethodConfig m = Service(0, 1, 1);
  EXPECT_FALSE(PredictStep(MillionElements(), FourGpus(), {}, {}, m).ok());
  m = Service(1, 1, 1);
  m.push_pull_overlap = 1.5;
  EXPECT_FALSE(PredictStep(MillionElements(), FourGpus(), {}, {}, m).ok());
  Cluster c = FourGpus();
  c.link_bps = 0;
  EXPECT_FALSE(PredictStep(MillionElements(), c, {}, {}, Service(1, 1, 1)).ok());
  c = {.gpus = 6, .gpus_per_node = 4, .link_bps = 1e9, .nvlink_bps = 1e10};
  m.push_pull_overlap = 0;
  m.hierarchy = Hierarchy::kNode;
  EXPECT_FALSE(PredictStep(MillionElements(), c, {}, {}, m).ok());
  EXPECT_FALSE(PredictStep({}, FourGpus(), {}, {}, Service(1, 1, 1)).ok());
}

}  // namespace
}  // namespace gift::bench
