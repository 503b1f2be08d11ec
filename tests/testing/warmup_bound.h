// How long a test may step a cluster while it waits for something that a
// background thread makes happen (a basis refresh that activates at a step the
// coordinator picks when the owner publishes it). Steps are cheap (tens of
// milliseconds), the refresh is not, and under load (ctest -j2 on a 2-core CI
// machine) it finishes many steps later than on an idle machine: a bound on
// steps alone is a timing assumption. This bounds both, generously.
//
//   test::WarmupBound warmup;
//   for (bool ready = false; !ready; ++step) {
//     ASSERT_FALSE(warmup.Exhausted(step)) << "no basis activated";
//     ...
//   }
//
// Thread safety: a value; use from the test's thread.
#ifndef GIFT_TESTS_TESTING_WARMUP_BOUND_H_
#define GIFT_TESTS_TESTING_WARMUP_BOUND_H_

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gift::test {

class WarmupBound {
 public:
  explicit WarmupBound(uint64_t max_steps = 1000, absl::Duration max_time = absl::Seconds(60))
      : max_steps_(max_steps), deadline_(absl::Now() + max_time) {}

  // True once `step` reached the step bound or the time bound has passed.
  bool Exhausted(uint64_t step) const { return step >= max_steps_ || absl::Now() > deadline_; }

 private:
  uint64_t max_steps_;
  absl::Time deadline_;
};

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_WARMUP_BOUND_H_
