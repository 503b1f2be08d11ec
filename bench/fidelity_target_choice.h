// `gift-bench fidelity --grads ... --target SPEC`: the choice a basis owner
// would make under the fidelity target (docs/design.md section 3.7,
// common/transform/fidelity_target.h) from the method grid's measurements
// of one tensor.
//
// Options: every measured method (direct, and every family configuration
// the grid measured; hadamard and dense are references, not candidates) in
// every measured spec. Error: the grid's rel_l2_avg (the average of the P
// workers' decoded pushes, pulled in FP32). Bytes per step and worker, as
// the owner counts them: the push payload in the option's spec, the pull
// payload in the target spec (the owner's pair (c, pull); its (c, c) pairs
// need a measured pull and are not offered here), the basis of a family
// option (4 bytes per side element and rank, d_out r + d_in r for both
// sides) over `refresh_period` steps, and for a per-worker source its
// sketches both ways in the statistics codec (policy::StatisticsWireBytes of
// k n + n + 1 values per sketched side) on every step. The
// choice: the fewest bytes whose error is at most the target spec's direct
// error (no compute budget here).
//
// Thread safety: a pure function that writes to `os`.
#ifndef GIFT_BENCH_FIDELITY_TARGET_CHOICE_H_
#define GIFT_BENCH_FIDELITY_TARGET_CHOICE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/fidelity_methods.h"
#include "common/codec/codec_spec.h"
#include "common/policy/policy.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct TargetChoiceOptions {
  std::string target = "e4m3/block128";  // must be among the measured specs
  int64_t d_out = 0;
  int64_t d_in = 0;
  uint32_t refresh_period = 10;
  // The per-worker sketches (collected every step): their codec (the
  // policy's statistics_codec) and columns k (its statistics_columns).
  codec::CodecSpec statistics_codec = {.format = codec::Format::kBf16,
                                       .scaling = codec::Scaling::kNone};
  int64_t sketch_size = policy::kDefaultStatisticsColumns;
};

// Prints the choice and, per spec, its cheapest option within the target;
// returns them as JSON ({"target": ..., "chosen": ..., ...}). InvalidArgument
// when the target spec was not measured or does not parse.
absl::StatusOr<nlohmann::json> PrintTargetChoice(const std::vector<MethodResult>& results,
                                                 const TargetChoiceOptions& options,
                                                 std::ostream& os);

}  // namespace gift::bench

#endif  // GIFT_BENCH_FIDELITY_TARGET_CHOICE_H_
