#include "bench/gpu_share_pacer.h"

#include <chrono>

#include "gtest/gtest.h"

namespace gift::bench {
namespace {

using std::chrono::milliseconds;
using Clock = StepPacer::Clock;

TEST(StepPacerTest, BackToBackStartsAtOnce) {
  const Clock::time_point t0{};
  StepPacer pacer(0, t0);
  EXPECT_FALSE(pacer.paced());
  EXPECT_EQ(pacer.Next(t0), t0);
  EXPECT_EQ(pacer.Next(t0 + milliseconds(7)), t0 + milliseconds(7));
}

TEST(StepPacerTest, KeepsTheRateFromTheFirstStep) {
  const Clock::time_point t0{};
  StepPacer pacer(10, t0);  // every 100 ms
  EXPECT_TRUE(pacer.paced());
  EXPECT_EQ(pacer.Next(t0), t0);
  // Steps that end early wait for their slot; the slots do not drift with
  // the steps' own durations.
  EXPECT_EQ(pacer.Next(t0 + milliseconds(30)), t0 + milliseconds(100));
  EXPECT_EQ(pacer.Next(t0 + milliseconds(120)), t0 + milliseconds(200));
  EXPECT_EQ(pacer.Next(t0 + milliseconds(299)), t0 + milliseconds(300));
}

TEST(StepPacerTest, ALateStepDropsTheMissedSlotsInsteadOfBursting) {
  const Clock::time_point t0{};
  StepPacer pacer(10, t0);
  EXPECT_EQ(pacer.Next(t0), t0);
  // The first step took 350 ms: slots 100, 200 and 300 are gone, the next
  // step starts at once and the one after it 100 ms later.
  EXPECT_EQ(pacer.Next(t0 + milliseconds(350)), t0 + milliseconds(350));
  EXPECT_EQ(pacer.Next(t0 + milliseconds(360)), t0 + milliseconds(450));
}

TEST(StepPacerTest, NeverAnswersBeforeNow) {
  const Clock::time_point t0{};
  StepPacer pacer(1000, t0);
  Clock::time_point now = t0;
  for (int i = 0; i < 50; ++i) {
    const Clock::time_point at = pacer.Next(now);
    EXPECT_GE(at, now);
    now = at + milliseconds(i % 3);  // steps of 0, 1 and 2 ms at 1 ms slots
  }
}

}  // namespace
}  // namespace gift::bench
