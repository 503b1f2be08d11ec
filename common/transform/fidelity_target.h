// The fidelity target (policy selection.target, docs/design.md section 3.7):
// among the ways a tensor can travel (codec pairs, direct or through a
// basis), the one with the fewest wire bytes per step whose measured error
// is at most the target's.
//
// Each option comes with its measured relative error, its bytes per step
// (see WireBytesPerStep) and its compute (seconds per step of transforms on
// a worker; 0 direct). An option is eligible when
//
//   error <= target_error   and   compute_seconds <= compute_budget
//
// and the eligible option with the fewest bytes wins; equal bytes go to the
// lower compute, then to the lower index. The caller puts the target itself
// (the target codec both ways, direct: error == target_error, no compute)
// among the options, so one is always eligible; without it the result may
// be -1 (none eligible).
//
//   std::vector<WireOption> options = {{.error = 0.031, .bytes_per_step = 2.1e6},  // target
//                                      {.error = 0.029, .bytes_per_step = 1.3e6,
//                                       .compute_seconds = 0.002}};
//   int chosen = *ChooseWireOption(options, /*target_error=*/0.031, /*budget=*/0.01);  // 1
//
// Thread safety: pure functions.
#ifndef GIFT_COMMON_TRANSFORM_FIDELITY_TARGET_H_
#define GIFT_COMMON_TRANSFORM_FIDELITY_TARGET_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gift::transform {

struct WireOption {
  double error = 0.0;            // measured relative error, finite and >= 0
  double bytes_per_step = 0.0;   // finite and > 0
  double compute_seconds = 0.0;  // finite and >= 0
};

// The index of the chosen option, or -1 when none is eligible.
// InvalidArgument on an option out of its ranges, a target error that is
// negative or not finite, or a compute budget that is negative or NaN (it
// may be +infinity).
absl::StatusOr<int> ChooseWireOption(absl::Span<const WireOption> options, double target_error,
                                     double compute_budget);

// What one worker sends and receives per step for a tensor travelling one
// way, all in bytes:
//   push_payload + pull_payload                      (the tensor, each step)
//   + statistics_per_collect / collect_period        (per-worker sketches,
//                                                     pushed and pulled)
//   + basis_bytes / refresh_period                   (each refresh's basis,
//                                                     fetched once)
// Periods are in steps, >= 1 (0 is taken as 1).
double WireBytesPerStep(uint64_t push_payload, uint64_t pull_payload,
                        uint64_t statistics_per_collect, uint32_t collect_period,
                        uint64_t basis_bytes, uint32_t refresh_period);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_FIDELITY_TARGET_H_
