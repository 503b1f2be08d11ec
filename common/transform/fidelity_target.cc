#include "common/transform/fidelity_target.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gift::transform {

absl::StatusOr<int> ChooseWireOption(absl::Span<const WireOption> options, double target_error,
                                     double compute_budget) {
  if (!std::isfinite(target_error) || target_error < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChooseWireOption: target error ", target_error, " is not finite and >= 0"));
  }
  if (std::isnan(compute_budget) || compute_budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChooseWireOption: compute budget ", compute_budget, " is negative or NaN"));
  }
  int best = -1;
  for (size_t i = 0; i < options.size(); ++i) {
    const WireOption& o = options[i];
    if (!std::isfinite(o.error) || o.error < 0 || !std::isfinite(o.bytes_per_step) ||
        o.bytes_per_step <= 0 || !std::isfinite(o.compute_seconds) || o.compute_seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ChooseWireOption: option ", i, " has error ", o.error, ", ", o.bytes_per_step,
          " bytes per step and ", o.compute_seconds, " compute seconds"));
    }
    if (o.error > target_error || o.compute_seconds > compute_budget) continue;
    if (best >= 0) {
      const WireOption& b = options[best];
      if (o.bytes_per_step > b.bytes_per_step) continue;
      if (o.bytes_per_step == b.bytes_per_step && o.compute_seconds >= b.compute_seconds) continue;
    }
    best = static_cast<int>(i);
  }
  return best;
}

double WireBytesPerStep(uint64_t push_payload, uint64_t pull_payload,
                        uint64_t statistics_per_collect, uint32_t collect_period,
                        uint64_t basis_bytes, uint32_t refresh_period) {
  return static_cast<double>(push_payload) + static_cast<double>(pull_payload) +
         static_cast<double>(statistics_per_collect) / std::max<uint32_t>(collect_period, 1) +
         static_cast<double>(basis_bytes) / std::max<uint32_t>(refresh_period, 1);
}

}  // namespace gift::transform
