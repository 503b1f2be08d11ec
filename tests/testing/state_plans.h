// Step plans made from a coordinator's cluster state, for tests that drive
// in-process push-pull engines through real servers: the FP32 tensor specs
// to register, the "the cluster is ready" predicate to wait for, and one
// worker's plan of a step over the state's shard map with seeded gaussian
// gradients.
//
//   ASSERT_TRUE(session->RegisterTensors(test::Float32Specs({{64, 96}})).ok());
//   auto state = session->WaitFor(test::ClusterReady(2, 1, 1), absl::Seconds(30));
//   std::vector<std::vector<float>> buffers;
//   worker::StepPlan plan = test::PlanFromState(**state, step, rank, 2, push, &buffers);
//   auto reports = test::RunPlans(engines, plans);
//
// Ownership: nothing is started or owned; a plan points into the caller's
// `buffers`, which must outlive it. Thread safety: pure functions, except
// RunPlans, which runs each engine on a thread of its own and joins them.
#ifndef GIFT_TESTS_TESTING_STATE_PLANS_H_
#define GIFT_TESTS_TESTING_STATE_PLANS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::test {

// FP32 tensors named "layer<i>.weight" with the given shapes.
std::vector<gift::v1::TensorSpec> Float32Specs(const std::vector<std::vector<int64_t>>& shapes);

// True once the state has `workers` workers, `servers` servers, `tensors`
// tensors and a shard map with chunks made for the current epoch.
std::function<bool(const gift::v1::ClusterState&)> ClusterReady(int workers, int servers,
                                                                int tensors);

// The data addresses of the state's servers, indexed by shard (rank).
std::vector<std::string> ServerAddresses(const gift::v1::ClusterState& state);

// The plan of worker `rank` (of `world`) for `step` of the state's epoch:
// every tensor of the state, its chunks routed to their servers, pushed
// with `push`. Each tensor's gradient is appended to `*buffers` (cleared
// first): normal(0, 1) from a generator seeded with
// step * 100 + tensor_id * 10 + rank.
worker::StepPlan PlanFromState(const gift::v1::ClusterState& state, uint64_t step, uint32_t rank,
                               uint32_t world, const codec::CodecSpec& push,
                               std::vector<std::vector<float>>* buffers);

// Runs plans[i] on engines[i], all at once (one thread each), and returns
// each engine's report in order once all have returned.
std::vector<absl::StatusOr<worker::StepReport>> RunPlans(
    const std::vector<std::unique_ptr<worker::PushPullEngine>>& engines,
    const std::vector<worker::StepPlan>& plans);

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_STATE_PLANS_H_
