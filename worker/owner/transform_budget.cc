#include "worker/owner/transform_budget.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "common/policy/policy.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {
namespace {

// Weight of a new rate measurement: the owner measures once per refresh,
// and one measurement on a loaded machine can be far off.
constexpr double kRateWeight = 0.3;
// Weight of a new step time: steps vary (a refresh, a measured step), and the
// budget should follow the job's pace, not one step.
constexpr double kStepWeight = 0.1;
// The step's transforms are estimated, not measured: never let the estimate
// leave less than this fraction of the step as its direct part.
constexpr double kMinDirectFraction = 0.1;

// Whether measured selection may transform the tensor.
bool Budgetable(const gift::v1::Policy& policy, const gift::v1::TensorInfo& tensor) {
  const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  return policy::IsTransformable(shape) &&
         policy::ResolveTensorSettings(policy, tensor.name(), shape).selection ==
             policy::Selection::kMeasure;
}

}  // namespace

double TransformBudget::TransformFlops(int64_t rows, int64_t cols, int64_t rank_out,
                                       int64_t rank_in) {
  return 2.0 * 4.0 * static_cast<double>(rows) * static_cast<double>(cols) *
         static_cast<double>(rank_out + rank_in);
}

double TransformBudget::BasisFlops(const transform::TensorBasis& basis, int64_t rows,
                                   int64_t cols) {
  return TransformFlops(rows, cols, basis.output_side() ? basis.output_side()->rank() : 0,
                        basis.input_side() ? basis.input_side()->rank() : 0);
}

void TransformBudget::RecordTransform(double flops, double seconds) {
  if (!(flops > 0.0) || !(seconds > 0.0)) return;
  const double rate = seconds / flops;
  seconds_per_flop_ = seconds_per_flop_ == 0.0
                          ? rate
                          : (1.0 - kRateWeight) * seconds_per_flop_ + kRateWeight * rate;
}

void TransformBudget::RecordStep(uint64_t step, double seconds) {
  if (!(seconds > 0.0) || (any_step_ && step == last_step_)) return;
  step_seconds_ = any_step_ ? (1.0 - kStepWeight) * step_seconds_ + kStepWeight * seconds : seconds;
  any_step_ = true;
  last_step_ = step;
}

double TransformBudget::ActiveFlops(const gift::v1::ClusterState& state, uint64_t step) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  double flops = 0.0;
  for (const gift::v1::TensorInfo& tensor : state.tensors()) {
    const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    if (!policy::IsTransformable(shape)) continue;
    const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
    const gift::v1::BasisVersion* active = basis == nullptr ? nullptr : ActiveVersion(*basis, step);
    if (active == nullptr || active->direct()) continue;
    const policy::TensorSettings settings =
        policy::ResolveTensorSettings(policy, tensor.name(), shape);
    const gift::v1::Sides sides = settings.transform.sides();
    const int64_t rank = active->rank();
    const int64_t out = sides == gift::v1::SIDES_INPUT ? 0 : std::min(rank, shape[0]);
    const int64_t in = sides == gift::v1::SIDES_OUTPUT ? 0 : std::min(rank, shape[1]);
    flops += TransformFlops(shape[0], shape[1], out, in);
  }
  return flops;
}

double TransformBudget::OwnedShare(const gift::v1::ClusterState& state,
                                   const std::string& member_id) {
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  double all = 0.0, owned = 0.0;
  for (const gift::v1::TensorInfo& tensor : state.tensors()) {
    if (!Budgetable(policy, tensor)) continue;
    const double elements =
        static_cast<double>(tensor.shape(0)) * static_cast<double>(tensor.shape(1));
    all += elements;
    const gift::v1::TensorBasisState* basis = FindBasisState(state, tensor.tensor_id());
    if (basis != nullptr && basis->owner_member_id() == member_id) owned += elements;
  }
  return all > 0.0 ? owned / all : 0.0;
}

double TransformBudget::OwnerBudget(double fraction, double active_flops, double share) const {
  if (fraction <= 0.0 || seconds_per_flop_ <= 0.0 || step_seconds_ <= 0.0) {
    return std::numeric_limits<double>::infinity();
  }
  const double direct = std::max(step_seconds_ - active_flops * seconds_per_flop_,
                                 kMinDirectFraction * step_seconds_);
  return fraction * direct * share;
}

absl::StatusOr<int> TransformBudget::Choose(uint64_t tensor_id, transform::BudgetedTensor table,
                                            double budget, double margin) {
  tables_.insert_or_assign(tensor_id, std::move(table));
  std::vector<transform::BudgetedTensor> tables;
  size_t index = 0;
  for (const auto& [id, t] : tables_) {
    if (id == tensor_id) index = tables.size();
    tables.push_back(t);
  }
  auto chosen = transform::ChooseUnderBudget(tables, budget, margin);
  if (!chosen.ok()) {
    tables_.erase(tensor_id);
    return chosen.status();
  }
  return (*chosen)[index];
}

}  // namespace gift::worker
