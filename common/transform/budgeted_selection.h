// Which transform each tensor runs when the transforms of a step may cost at
// most a budget of time: the choice by benefit per unit of cost.
//
// Each tensor comes with its measured error under direct quantization and a
// list of candidates (e.g. its basis at ranks 8, 16, 32, 64), each with its
// measured error and its cost (seconds per step: the forward and inverse
// transform of every worker's share). A candidate is eligible when it beats
// direct by the margin (error <= (1 - margin) * direct_error, and error <
// direct_error), as in SelectTransform (transform_selector.h).
//
// Every tensor starts at direct (cost 0). Then, repeatedly, among the moves
// of one tensor from its current choice to an eligible candidate that costs
// more and errs less, and that fits in what is left of the budget, the move
// with the largest value per unit of added cost is taken:
//
//   value = weight * (error_now - error_candidate) / direct_error
//
// (the fraction of the tensor's direct error removed, times its weight, e.g.
// its number of elements), until no move fits. Ties go to the lower tensor
// index, then the lower candidate index. With an infinite budget every
// tensor ends at its lowest-error eligible candidate; with a zero budget at
// direct.
//
//   std::vector<int> chosen = ChooseUnderBudget(tensors, /*budget=*/0.004, /*margin=*/0.1);
//   if (chosen[t] >= 0) ... tensors[t].candidates[chosen[t]] runs ...
//
// Thread safety: a pure function.
#ifndef GIFT_COMMON_TRANSFORM_BUDGETED_SELECTION_H_
#define GIFT_COMMON_TRANSFORM_BUDGETED_SELECTION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gift::transform {

struct CostedCandidate {
  double error = 0.0;  // measured relative error, >= 0
  double cost = 0.0;   // seconds per step, > 0
};

struct BudgetedTensor {
  double weight = 1.0;        // > 0
  double direct_error = 0.0;  // > 0 (a tensor direct quantization leaves exact has nothing to gain)
  std::vector<CostedCandidate> candidates;
};

// The index of each tensor's chosen candidate, or -1 for direct, in the
// order of `tensors`. InvalidArgument on a weight or direct error that is
// not finite and > 0, a candidate error that is negative or not finite, a
// cost that is not finite and > 0, a negative or NaN budget (it may be
// +infinity), or a margin outside [0, 1).
absl::StatusOr<std::vector<int>> ChooseUnderBudget(absl::Span<const BudgetedTensor> tensors,
                                                   double budget, double margin);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_BUDGETED_SELECTION_H_
