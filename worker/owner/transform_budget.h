// A basis owner's share of the step budget (policy selection.gift_budget):
// what the transforms cost on this worker, how much of a step the owner's
// tensors may spend on them, and the choice among its tensors' measured
// candidates (common/transform/budgeted_selection.h).
//
// Cost model: a worker runs, per step and transformed tensor, one forward
// transform of its gradient and one inverse of the result; with side ranks
// r_out and r_in each costs 4 rows cols (r_out + r_in) flops
// (tensor_basis_fp32.h: the skinny products and the rank-k update). The
// seconds per flop are measured on this worker's own threads (the owner
// times a forward and inverse at each refresh), so a candidate's cost is
// its flops times that rate.
//
// Budget of the owner: fraction x (step seconds - the step's transform
// seconds) x share, where the step's transform seconds are estimated from
// the active bases of every tensor (their flops at the measured rate), and
// share is the owner's part of the elements of all tensors that measured
// selection may transform (every owner runs on the same budget rule, so the
// shares add up to the whole).
//
// Thread safety: thread-compatible (the owner thread alone uses it).
#ifndef GIFT_WORKER_OWNER_TRANSFORM_BUDGET_H_
#define GIFT_WORKER_OWNER_TRANSFORM_BUDGET_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/transform/budgeted_selection.h"
#include "common/transform/tensor_basis.h"
#include "gift/v1/cluster.pb.h"

namespace gift::worker {

// The ranks a budgeted refresh measures below the policy's (which is the
// top candidate: 64 by default).
inline constexpr int64_t kBudgetRanks[] = {8, 16, 32};

class TransformBudget {
 public:
  // Flops of one step's forward and inverse transform of a rows x cols
  // tensor with these side ranks (0: the side is not transformed).
  static double TransformFlops(int64_t rows, int64_t cols, int64_t rank_out, int64_t rank_in);
  // TransformFlops of `basis` (its sides' ranks) on a rows x cols tensor.
  static double BasisFlops(const transform::TensorBasis& basis, int64_t rows, int64_t cols);

  // A forward plus inverse of `flops` took `seconds`: folded into the rate
  // (an EMA, the first measurement taken as is). Ignored unless both > 0.
  void RecordTransform(double flops, double seconds);
  // 0 until the first measurement.
  double seconds_per_flop() const { return seconds_per_flop_; }

  // The wall time of this worker's step `step` (an EMA over steps: the
  // owner sees each step once per owned tensor; only the first counts).
  void RecordStep(uint64_t step, double seconds);
  // 0 until the first step.
  double step_seconds() const { return step_seconds_; }

  // The step's transform flops under `state` at `step`: every tensor with an
  // active basis that is not direct, at that version's rank, on the sides
  // its resolved policy transforms.
  static double ActiveFlops(const gift::v1::ClusterState& state, uint64_t step);
  // The share of this member's tensors in the elements measured selection
  // may transform (0 when there are none).
  static double OwnedShare(const gift::v1::ClusterState& state, const std::string& member_id);

  // fraction x (step_seconds() - active_flops x rate, at least a tenth of
  // the step) x share; +infinity while the rate or the step time is unknown
  // (0), or with fraction 0 (the budget is off).
  double OwnerBudget(double fraction, double active_flops, double share) const;

  // Records `table` as the tensor's latest measurement (replacing an older
  // one) and chooses among all recorded tables under `budget`; returns the
  // tensor's choice (-1: direct). Errors of ChooseUnderBudget.
  absl::StatusOr<int> Choose(uint64_t tensor_id, transform::BudgetedTensor table, double budget,
                             double margin);
  // The tensor left the owner or the budget (its table no longer counts).
  void Forget(uint64_t tensor_id) { tables_.erase(tensor_id); }

 private:
  double seconds_per_flop_ = 0.0;
  double step_seconds_ = 0.0;
  uint64_t last_step_ = 0;
  bool any_step_ = false;
  std::map<uint64_t, transform::BudgetedTensor> tables_;  // by tensor id
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_OWNER_TRANSFORM_BUDGET_H_
