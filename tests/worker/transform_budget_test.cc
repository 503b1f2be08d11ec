// The owner's side of the step budget (worker/owner/transform_budget.h): the cost
// model, the measured rate, the owner's budget, and the choice over the
// owner's tensors, on hand-built cluster states.
#include "worker/owner/transform_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace gift::worker {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void AddTensor(gift::v1::ClusterState* state, uint64_t id, const std::string& name,
               std::initializer_list<int64_t> shape, const std::string& owner, bool direct,
               uint32_t rank) {
  gift::v1::TensorInfo* t = state->add_tensors();
  t->set_tensor_id(id);
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  gift::v1::TensorBasisState* b = state->add_bases();
  b->set_tensor_id(id);
  b->set_owner_member_id(owner);
  gift::v1::BasisVersion* v = b->add_versions();
  v->set_version(direct ? 0 : 3);
  v->set_activation_step(0);
  v->set_direct(direct);
  v->set_rank(rank);
}

TEST(TransformBudgetTest, FlopsAreTheForwardAndInverseOfBothSides) {
  EXPECT_DOUBLE_EQ(TransformBudget::TransformFlops(512, 1376, 64, 64), 8.0 * 512 * 1376 * 128);
  EXPECT_DOUBLE_EQ(TransformBudget::TransformFlops(512, 1376, 0, 32), 8.0 * 512 * 1376 * 32);
}

TEST(TransformBudgetTest, TheRateIsAnAverageOfMeasurements) {
  TransformBudget budget;
  EXPECT_EQ(budget.seconds_per_flop(), 0.0);
  budget.RecordTransform(1e9, 1.0);
  EXPECT_DOUBLE_EQ(budget.seconds_per_flop(), 1e-9);
  budget.RecordTransform(1e9, 2.0);
  EXPECT_DOUBLE_EQ(budget.seconds_per_flop(), 0.7e-9 + 0.3 * 2e-9);
  budget.RecordTransform(0.0, 1.0);  // ignored
  budget.RecordTransform(1e9, 0.0);
  EXPECT_DOUBLE_EQ(budget.seconds_per_flop(), 0.7e-9 + 0.3 * 2e-9);
}

TEST(TransformBudgetTest, TheOwnersBudgetIsItsShareOfTheDirectStep) {
  TransformBudget budget;
  // No rate, no step time, or the budget off: unbounded.
  budget.RecordStep(1, 1.0);
  EXPECT_EQ(budget.OwnerBudget(0.05, 0.0, 1.0), kInf);
  budget.RecordTransform(1e9, 1.0);  // 1 ns per flop
  EXPECT_EQ(budget.OwnerBudget(0.0, 0.0, 1.0), kInf);
  // A 1 s step of which 0.5 s are the transforms (5e8 flops): 5 % of the
  // 0.5 s direct part, half of it this owner's.
  EXPECT_DOUBLE_EQ(budget.OwnerBudget(0.05, 5e8, 0.5), 0.05 * 0.5 * 0.5);
  // An estimate above the step leaves it a tenth as its direct part.
  EXPECT_DOUBLE_EQ(budget.OwnerBudget(0.05, 2e9, 1.0), 0.05 * 0.1);
}

TEST(TransformBudgetTest, StepTimesAreAveragedOncePerStep) {
  TransformBudget budget;
  EXPECT_EQ(budget.step_seconds(), 0.0);
  budget.RecordStep(4, 1.0);
  EXPECT_DOUBLE_EQ(budget.step_seconds(), 1.0);
  budget.RecordStep(4, 3.0);  // the same step again (another owned tensor)
  EXPECT_DOUBLE_EQ(budget.step_seconds(), 1.0);
  budget.RecordStep(5, 2.0);
  EXPECT_DOUBLE_EQ(budget.step_seconds(), 0.9 * 1.0 + 0.1 * 2.0);
  budget.RecordStep(6, 0.0);  // unknown: ignored
  EXPECT_DOUBLE_EQ(budget.step_seconds(), 0.9 * 1.0 + 0.1 * 2.0);
}

TEST(TransformBudgetTest, ActiveFlopsAndTheOwnedShareFollowTheState) {
  gift::v1::ClusterState state;
  // (At least the default min_elements, 4096, so measured selection may
  // transform them.)
  AddTensor(&state, 1, "a", {128, 64}, "m1", /*direct=*/false, /*rank=*/8);
  AddTensor(&state, 2, "b", {64, 64}, "m2", /*direct=*/true, 0);
  AddTensor(&state, 3, "bias", {32}, "", /*direct=*/true, 0);
  // Only "a" runs a basis: rank 8 on both sides (the default policy).
  EXPECT_DOUBLE_EQ(TransformBudget::ActiveFlops(state, 10),
                   TransformBudget::TransformFlops(128, 64, 8, 8));
  EXPECT_DOUBLE_EQ(TransformBudget::OwnedShare(state, "m1"), 8192.0 / (8192 + 4096));
  EXPECT_DOUBLE_EQ(TransformBudget::OwnedShare(state, "m2"), 4096.0 / (8192 + 4096));
  EXPECT_EQ(TransformBudget::OwnedShare(state, "nobody"), 0.0);
  // "b" always transformed (an override): not part of the budget.
  gift::v1::TensorOverride* o = state.mutable_policy()->add_overrides();
  o->set_glob("b");
  o->set_enabled(true);
  EXPECT_DOUBLE_EQ(TransformBudget::OwnedShare(state, "m1"), 1.0);
  // Input side only: the output side costs nothing.
  state.mutable_policy()->mutable_transform()->set_sides(gift::v1::SIDES_INPUT);
  EXPECT_DOUBLE_EQ(TransformBudget::ActiveFlops(state, 10),
                   TransformBudget::TransformFlops(128, 64, 0, 8));
}

TEST(TransformBudgetTest, ChoosesOverEveryRecordedTensor) {
  TransformBudget budget;
  const transform::BudgetedTensor a{.weight = 1, .direct_error = 1, .candidates = {{0.5, 1.0}}};
  const transform::BudgetedTensor b{.weight = 4, .direct_error = 1, .candidates = {{0.5, 1.0}}};
  // Alone, "a" fits.
  EXPECT_EQ(*budget.Choose(1, a, 1.5, 0.1), 0);
  // With "b" recorded, "b" is worth more per second and takes the budget.
  EXPECT_EQ(*budget.Choose(2, b, 1.5, 0.1), 0);
  EXPECT_EQ(*budget.Choose(1, a, 1.5, 0.1), -1);
  // Once "b" is forgotten, "a" fits again.
  budget.Forget(2);
  EXPECT_EQ(*budget.Choose(1, a, 1.5, 0.1), 0);
  // A bad table is refused and not kept.
  transform::BudgetedTensor bad = a;
  bad.direct_error = 0.0;
  EXPECT_FALSE(budget.Choose(3, bad, 1.5, 0.1).ok());
  EXPECT_EQ(*budget.Choose(1, a, 1.5, 0.1), 0);
}

}  // namespace
}  // namespace gift::worker
