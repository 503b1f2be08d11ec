#include "common/transform/budgeted_selection.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace gift::transform {
namespace {

bool PositiveFinite(double x) { return std::isfinite(x) && x > 0.0; }

absl::Status Check(absl::Span<const BudgetedTensor> tensors, double budget, double margin) {
  if (std::isnan(budget) || budget < 0.0) {
    return absl::InvalidArgumentError(absl::StrCat("budget ", budget, " is not >= 0"));
  }
  if (!(margin >= 0.0 && margin < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("margin ", margin, " is not in [0, 1)"));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    const BudgetedTensor& tensor = tensors[t];
    if (!PositiveFinite(tensor.weight) || !PositiveFinite(tensor.direct_error)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t, ": weight ", tensor.weight,
                                                     " and direct error ", tensor.direct_error,
                                                     " must be finite and > 0"));
    }
    for (size_t c = 0; c < tensor.candidates.size(); ++c) {
      const CostedCandidate& candidate = tensor.candidates[c];
      if (!std::isfinite(candidate.error) || candidate.error < 0.0 ||
          !PositiveFinite(candidate.cost)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t, " candidate ", c, ": error ", candidate.error, " and cost ",
                         candidate.cost, " must be finite, the error >= 0 and the cost > 0"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> ChooseUnderBudget(absl::Span<const BudgetedTensor> tensors,
                                                   double budget, double margin) {
  if (absl::Status s = Check(tensors, budget, margin); !s.ok()) return s;
  std::vector<int> chosen(tensors.size(), -1);
  double left = budget;
  for (;;) {
    int best_tensor = -1, best_candidate = -1;
    double best_rate = 0.0, best_added = 0.0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const BudgetedTensor& tensor = tensors[t];
      const double error_now =
          chosen[t] < 0 ? tensor.direct_error : tensor.candidates[chosen[t]].error;
      const double cost_now = chosen[t] < 0 ? 0.0 : tensor.candidates[chosen[t]].cost;
      for (size_t c = 0; c < tensor.candidates.size(); ++c) {
        const CostedCandidate& candidate = tensor.candidates[c];
        const bool eligible = candidate.error < tensor.direct_error &&
                              candidate.error <= (1.0 - margin) * tensor.direct_error;
        const double added = candidate.cost - cost_now;
        if (!eligible || candidate.error >= error_now || added <= 0.0 || added > left) continue;
        const double rate =
            tensor.weight * (error_now - candidate.error) / tensor.direct_error / added;
        if (rate > best_rate) {
          best_rate = rate;
          best_tensor = static_cast<int>(t);
          best_candidate = static_cast<int>(c);
          best_added = added;
        }
      }
    }
    if (best_tensor < 0) return chosen;
    chosen[best_tensor] = best_candidate;
    left -= best_added;
  }
}

}  // namespace gift::transform
