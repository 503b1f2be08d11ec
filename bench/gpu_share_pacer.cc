#include "bench/gpu_share_pacer.h"

#include <chrono>

namespace gift::bench {

StepPacer::StepPacer(double steps_per_second, Clock::time_point start)
    : paced_(steps_per_second > 0), next_(start) {
  if (paced_) {
    period_ = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / steps_per_second));
  }
}

StepPacer::Clock::time_point StepPacer::Next(Clock::time_point now) {
  if (!paced_) return now;
  if (now > next_) next_ = now;  // late: drop the missed slots
  const Clock::time_point at = next_;
  next_ += period_;
  return at;
}

}  // namespace gift::bench
