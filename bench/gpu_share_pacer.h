// When the worker role of `gift-bench gpu-share` starts its next step: at a
// fixed rate from the first step, or back to back (rate 0). A step that ends
// after the next planned start does not cause a burst to catch up: the
// missed slots are dropped, the next step starts at once and the schedule
// keeps the rate from there, so the duty stays at most the rate asked.
//
// Thread safety: thread-compatible (one pacer per loop).
#ifndef GIFT_BENCH_GPU_SHARE_PACER_H_
#define GIFT_BENCH_GPU_SHARE_PACER_H_

#include <chrono>

namespace gift::bench {

class StepPacer {
 public:
  using Clock = std::chrono::steady_clock;

  // `steps_per_second`: finite, >= 0; 0 means back to back. `start`: when
  // the first step may start.
  StepPacer(double steps_per_second, Clock::time_point start);

  // When the next step should start, the previous one having ended at `now`
  // (for the first step: any `now` >= start). Never earlier than `now`.
  Clock::time_point Next(Clock::time_point now);

  bool paced() const { return paced_; }

 private:
  bool paced_;
  Clock::duration period_{};
  Clock::time_point next_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_GPU_SHARE_PACER_H_
