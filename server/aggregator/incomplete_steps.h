// What a shard knows of the steps it could not complete: for each step some
// rank pushed and some did not, how many of the shard's chunks wait and which
// ranks are missing from them. The servers' logs name these ranks when an
// epoch aborts the steps and when a drain leaves them behind, and the abort
// sent to the workers says who had not pushed.
//
// Thread safety: a value type (thread-compatible).
#ifndef GIFT_SERVER_AGGREGATOR_INCOMPLETE_STEPS_H_
#define GIFT_SERVER_AGGREGATOR_INCOMPLETE_STEPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace gift::server {

struct IncompleteStep {
  uint64_t step = 0;
  uint64_t chunks = 0;                  // chunks of the step that some rank pushed
  std::vector<uint32_t> missing_ranks;  // missing from at least one of them, ascending
};

class IncompleteSteps {
 public:
  // One more incomplete chunk of `step`; covered[r] != 0 for each rank that
  // chunk counted (a node sum covers its group).
  void Add(uint64_t step, absl::Span<const uint8_t> covered);

  bool empty() const { return steps_.empty(); }
  // By step, ascending.
  std::vector<IncompleteStep> steps() const;

  // "step 12 (3 chunks): ranks 1, 3 missing; step 13 ..." (empty when none;
  // at most `max_steps` steps, then how many more).
  std::string Describe(size_t max_steps = 8) const;

 private:
  struct Tally {
    uint64_t chunks = 0;
    std::vector<uint8_t> missing;  // by rank
  };
  std::map<uint64_t, Tally> steps_;
};

// "ranks 1, 3" / "rank 2" (at most 16 ranks, then how many more).
std::string DescribeRanks(absl::Span<const uint32_t> ranks);

// "1 chunk" / "3 chunks".
std::string DescribeChunks(uint64_t chunks);

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_INCOMPLETE_STEPS_H_
