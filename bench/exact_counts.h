// The exact-once check of the fault benches (gift-bench faults, soak): worker
// w (its launch index) pushes 4^w in every element of an FP32, untransformed
// tensor, so avg * world_size is an integer whose base-4 digit w says how
// many times w was counted.
//
// Thread safety: stateless functions.
#ifndef GIFT_BENCH_EXACT_COUNTS_H_
#define GIFT_BENCH_EXACT_COUNTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/worker_client.h"

namespace gift::bench {

// The value worker w pushes: 4^w.
float ExactValue(int w);

// Who the step counted: the base-4 digits of avg * world_size, per element
// (digit w: launch index w; digit `workers`: a spoofer's 4^workers).
// DataLoss when an element's sum has digits beyond that.
absl::StatusOr<std::vector<std::vector<int>>> Counts(const client::SharedTensor& t, uint32_t world,
                                                     int workers);

// A step's counts against the workers `expected` to be counted once each
// and the workers that `may` be counted once (they took part, but their own
// call failed): which of `expected` were missing somewhere (lost), which
// workers were counted twice or counted without taking part (doubled), and
// the fraction of elements that counted digit `workers` (a spoofer).
struct CountCheck {
  int lost = 0;
  int doubled = 0;
  double spoofed = 0;
};
CountCheck CheckCounts(const std::vector<std::vector<int>>& counts,
                       const std::vector<int>& expected, int workers,
                       const std::vector<int>& may = {});

}  // namespace gift::bench

#endif  // GIFT_BENCH_EXACT_COUNTS_H_
