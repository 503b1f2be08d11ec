#include "worker/plan/step_planner.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/transform/identity_transform.h"
#include "gtest/gtest.h"

namespace gift::worker {
namespace {

// Two workers, one server; tensor 7 is 4 x 8 in two chunks; tensor 8 is 1-D.
gift::v1::ClusterState State() {
  gift::v1::ClusterState s;
  s.set_revision(3);
  s.set_epoch(2);
  s.set_frozen_through_step(20);
  for (int r = 0; r < 2; ++r) {
    gift::v1::Member* w = s.add_workers();
    w->set_member_id(r == 0 ? "m-a" : "m-b");
    w->set_rank(r);
    w->set_data_address(r == 0 ? "wa" : "wb");
  }
  gift::v1::Member* server = s.add_servers();
  server->set_member_id("m-s");
  server->set_rank(0);
  server->set_data_address("server-0");
  gift::v1::TensorInfo* t = s.add_tensors();
  t->set_tensor_id(7);
  t->set_name("w");
  t->add_shape(4);
  t->add_shape(8);
  t->set_num_elements(32);
  t = s.add_tensors();
  t->set_tensor_id(8);
  t->set_name("b");
  t->add_shape(8);
  t->set_num_elements(8);
  s.mutable_shard_map()->set_epoch(2);
  for (auto [tensor, index, offset, n] : {std::tuple{7, 0, 0, 16}, {7, 1, 16, 16}, {8, 0, 0, 8}}) {
    gift::v1::Chunk* c = s.mutable_shard_map()->add_chunks();
    c->set_tensor_id(tensor);
    c->set_index(index);
    c->set_offset(offset);
    c->set_num_elements(n);
    c->set_server_rank(0);
  }
  gift::v1::TensorBasisState* b = s.add_bases();
  b->set_tensor_id(7);
  b->set_owner_member_id("m-a");
  for (auto [version, activation, direct] :
       {std::tuple{0, 0, true}, {3, 10, false}, {4, 15, true}}) {
    gift::v1::BasisVersion* v = b->add_versions();
    v->set_version(version);
    v->set_activation_step(activation);
    v->set_direct(direct);
  }
  return s;
}

std::vector<LocalTensor> Tensors(std::vector<float>& w, std::vector<float>& b) {
  return {{.tensor_id = 7, .name = "w", .rows = 4, .cols = 8, .data = w.data()},
          {.tensor_id = 8, .name = "b", .rows = 1, .cols = 8, .data = b.data()}};
}

struct Lookup {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  BasisLookup fn() {
    return [this](uint64_t tensor, uint64_t version)
               -> absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> {
      calls.emplace_back(tensor, version);
      return std::make_shared<const transform::IdentityTransform>(
          transform::IdentityTransform::Create(4, 8).value());
    };
  }
};

TEST(StepPlannerTest, ActiveVersionIsTheLatestActivationAtOrBeforeTheStep) {
  const gift::v1::ClusterState s = State();
  EXPECT_EQ(ActiveVersion(s.bases(0), 9)->version(), 0u);
  EXPECT_EQ(ActiveVersion(s.bases(0), 10)->version(), 3u);
  EXPECT_EQ(ActiveVersion(s.bases(0), 14)->version(), 3u);
  EXPECT_EQ(ActiveVersion(s.bases(0), 15)->version(), 4u);
  gift::v1::TensorBasisState empty;
  EXPECT_EQ(ActiveVersion(empty, 5), nullptr);
}

TEST(StepPlannerTest, PlansRankChunksAndTheActiveBasis) {
  std::vector<float> w(32), b(8);
  Lookup lookup;
  auto plan = PlanStep(State(), "m-b", 12, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->epoch, 2u);
  EXPECT_EQ(plan->step, 12u);
  EXPECT_EQ(plan->rank, 1u);
  EXPECT_EQ(plan->world_size, 2u);
  ASSERT_EQ(plan->tensors.size(), 2u);
  EXPECT_EQ(plan->tensors[0].basis_version, 3u);
  EXPECT_NE(plan->tensors[0].transform, nullptr);
  ASSERT_EQ(plan->tensors[0].chunks.size(), 2u);
  EXPECT_EQ(plan->tensors[0].chunks[1].offset, 16u);
  EXPECT_EQ(plan->tensors[0].chunks[1].server, "server-0");
  EXPECT_EQ(plan->tensors[1].transform, nullptr);  // no basis state: direct
  EXPECT_EQ(lookup.calls, (std::vector<std::pair<uint64_t, uint64_t>>{{7, 3}}));
  // Version 4 is direct: no lookup.
  auto later = PlanStep(State(), "m-b", 16, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->tensors[0].basis_version, 4u);
  EXPECT_EQ(later->tensors[0].transform, nullptr);
  EXPECT_EQ(lookup.calls.size(), 1u);
}

TEST(StepPlannerTest, WaitsForAStateThatCanCarryTheStep) {
  std::vector<float> w(32), b(8);
  Lookup lookup;
  auto code = [&](const gift::v1::ClusterState& s, const char* member, uint64_t step) {
    return PlanStep(s, member, step, Tensors(w, b), lookup.fn()).status().code();
  };
  EXPECT_EQ(code(State(), "m-gone", 1), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(State(), "m-a", 21), absl::StatusCode::kFailedPrecondition);  // not frozen
  gift::v1::ClusterState s = State();
  s.mutable_shard_map()->set_epoch(1);
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kFailedPrecondition);
  s = State();
  s.mutable_servers()->Clear();
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kFailedPrecondition);
  s = State();
  s.mutable_tensors()->RemoveLast();  // tensor 8
  // Mapped but not registered: inconsistent (the servers refuse it alike,
  // dataplane::StateViewOf).
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kInvalidArgument);
  auto* chunks = s.mutable_shard_map()->mutable_chunks();
  chunks->erase(std::remove_if(chunks->begin(), chunks->end(),
                               [](const gift::v1::Chunk& c) { return c.tensor_id() == 8; }),
                chunks->end());
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kFailedPrecondition);  // not registered yet
  s = State();
  s.mutable_tensors(1)->set_num_elements(9);
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kInvalidArgument);  // shape disagrees
  s = State();
  s.mutable_policy()->mutable_transform()->mutable_push_codec()->set_block_size(7);
  s.mutable_policy()->mutable_transform()->mutable_push_codec()->set_format(
      gift::v1::ELEMENT_FORMAT_E4M3);
  s.mutable_policy()->mutable_transform()->mutable_push_codec()->set_scaling(
      gift::v1::SCALING_PER_BLOCK_FP32);
  EXPECT_EQ(code(s, "m-a", 1), absl::StatusCode::kInvalidArgument);
}

TEST(StepPlannerTest, ErrorFeedbackComesFromThePolicyPerTensor) {
  std::vector<float> w(32), b(8);
  Lookup lookup;
  gift::v1::ClusterState s = State();
  auto plan = PlanStep(s, "m-a", 1, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->tensors[0].error_feedback);  // off by default
  EXPECT_FALSE(plan->tensors[1].error_feedback);

  s.mutable_policy()->mutable_transform()->set_error_feedback(true);
  gift::v1::TensorOverride* o = s.mutable_policy()->add_overrides();
  o->set_glob("b");
  o->set_error_feedback(false);
  plan = PlanStep(s, "m-a", 1, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->tensors[0].error_feedback);   // "w": the global value
  EXPECT_FALSE(plan->tensors[1].error_feedback);  // "b": its override
}

TEST(StepPlannerTest, WorkerSetChangesWithTheWorkersOnly) {
  std::vector<float> w(32), b(8);
  Lookup lookup;
  const gift::v1::ClusterState base = State();
  const uint64_t set = PlanStep(base, "m-a", 1, Tensors(w, b), lookup.fn())->worker_set;
  EXPECT_EQ(set, WorkerSetOf(base));

  gift::v1::ClusterState next_epoch = base;  // a new epoch, a new server, same workers
  next_epoch.set_epoch(3);
  next_epoch.mutable_shard_map()->set_epoch(3);
  next_epoch.add_servers()->set_member_id("m-s2");
  next_epoch.mutable_workers()->SwapElements(0, 1);  // order does not matter
  EXPECT_EQ(PlanStep(next_epoch, "m-a", 1, Tensors(w, b), lookup.fn())->worker_set, set);

  gift::v1::ClusterState replaced = base;  // same world size, another member
  replaced.mutable_workers(1)->set_member_id("m-c");
  EXPECT_NE(WorkerSetOf(replaced), set);
  gift::v1::ClusterState grown = base;
  gift::v1::Member* c = grown.add_workers();
  c->set_member_id("m-c");
  c->set_rank(2);
  EXPECT_NE(WorkerSetOf(grown), set);
}

TEST(StepPlannerTest, LookupErrorsArePassedOn) {
  std::vector<float> w(32), b(8);
  BasisLookup failing =
      [](uint64_t,
         uint64_t) -> absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> {
    return absl::NotFoundError("pruned");
  };
  EXPECT_EQ(PlanStep(State(), "m-a", 12, Tensors(w, b), failing).status().code(),
            absl::StatusCode::kNotFound);
}

// Each tensor carries its own push codec: the policy's for the 2-D tensor,
// bf16 for the 1-D one, and an override's where one matches.
TEST(StepPlannerTest, PushCodecPerTensor) {
  std::vector<float> w(32), b(8);
  Lookup lookup;
  gift::v1::ClusterState s = State();
  auto plan = PlanStep(s, "m-a", 1, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(codec::ToString(plan->tensors[0].push_spec), "e4m3/block128");
  EXPECT_EQ(codec::ToString(plan->tensors[1].push_spec), "bf16");

  gift::v1::TensorOverride* o = s.mutable_policy()->add_overrides();
  o->set_glob("w");
  *o->mutable_push_codec() = codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
  o = s.mutable_policy()->add_overrides();
  o->set_glob("b");
  *o->mutable_push_codec() = codec::ToProto(codec::ParseCodecSpec("e4m3/block32").value());
  plan = PlanStep(s, "m-a", 1, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(codec::ToString(plan->tensors[0].push_spec), "nvfp4");
  EXPECT_EQ(codec::ToString(plan->tensors[1].push_spec), "e4m3/block32");

  // A bad override codec is the plan's error, naming the tensor.
  o->mutable_push_codec()->set_block_size(7);
  auto bad = PlanStep(s, "m-a", 1, Tensors(w, b), lookup.fn());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'b'"), std::string::npos) << bad.status();
}

TEST(StepPlannerTest, AVersionsOwnPushCodecTakesOverFromItsActivationStep) {
  // The owner's choice under the fidelity target travels with the version.
  std::vector<float> w(32), b(8);
  Lookup lookup;
  gift::v1::ClusterState s = State();
  gift::v1::BasisVersion* v = s.mutable_bases(0)->add_versions();
  v->set_version(5);
  v->set_activation_step(18);
  v->set_direct(true);
  *v->mutable_push_codec() = codec::ToProto(codec::ParseCodecSpec("nvfp4/mse").value());
  *v->mutable_pull_codec() = codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
  auto before = PlanStep(s, "m-a", 17, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(codec::ToString(before->tensors[0].push_spec), "e4m3/block128");
  auto after = PlanStep(s, "m-a", 18, Tensors(w, b), lookup.fn());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tensors[0].basis_version, 5u);
  EXPECT_EQ(codec::ToString(after->tensors[0].push_spec), "nvfp4/mse");
  EXPECT_EQ(codec::ToString(after->tensors[1].push_spec), "bf16");  // no basis state
  // A version codec that does not parse is the plan's error, naming the tensor.
  v->mutable_push_codec()->set_block_size(7);
  auto bad = PlanStep(s, "m-a", 18, Tensors(w, b), lookup.fn());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'w'"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace gift::worker
