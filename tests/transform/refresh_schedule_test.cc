#include "common/transform/refresh_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gift::transform {
namespace {

RefreshSchedule Make(const RefreshScheduleOptions& options) {
  auto schedule = RefreshSchedule::Create(options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *schedule;
}

// Records `ratio` and returns what is due at `step` (no operator requests).
RefreshReason RecordThenDue(RefreshSchedule& s, uint64_t step, double ratio) {
  s.RecordRatio(ratio);
  return s.Due(step, 0);
}

TEST(RefreshScheduleTest, FirstThenEveryPeriod) {
  RefreshSchedule s = Make({.period_steps = 10, .drift_threshold = 0.0});
  EXPECT_EQ(s.Due(3, 0), RefreshReason::kFirst);
  s.MarkRefreshed(3, std::nullopt, 0);
  EXPECT_EQ(s.last_refresh_step(), 3u);
  for (uint64_t step = 4; step < 13; ++step) {
    EXPECT_EQ(RecordThenDue(s, step, 0.9), RefreshReason::kNone) << step;
  }
  EXPECT_EQ(s.Due(13, 0), RefreshReason::kPeriod);
  s.MarkRefreshed(13, std::nullopt, 0);
  EXPECT_EQ(s.Due(14, 0), RefreshReason::kNone);
}

TEST(RefreshScheduleTest, DriftTriggersEarlyRefresh) {
  RefreshSchedule s = Make({.period_steps = 100, .drift_threshold = 0.2, .drift_patience = 1});
  s.MarkRefreshed(0, 0.4, 0);
  EXPECT_EQ(RecordThenDue(s, 5, 0.47), RefreshReason::kNone);   // +17.5%
  EXPECT_EQ(RecordThenDue(s, 5, 0.49), RefreshReason::kDrift);  // +22.5%
  s.MarkRefreshed(5, 0.45, 0);
  EXPECT_EQ(s.drift_streak(), 0);
  EXPECT_EQ(RecordThenDue(s, 6, 0.5), RefreshReason::kNone);
  // Without a reference, only "worse than direct" counts as drift.
  s.MarkRefreshed(7, std::nullopt, 0);
  EXPECT_EQ(RecordThenDue(s, 8, 0.9), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 8, 1.0), RefreshReason::kDrift);
}

TEST(RefreshScheduleTest, DriftNeedsMeasurementsInARowAboveTheBar) {
  RefreshSchedule s = Make({.period_steps = 100, .drift_threshold = 0.2});  // patience 3
  s.MarkRefreshed(0, 0.4, 0);
  EXPECT_EQ(RecordThenDue(s, 1, 0.6), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 2, 0.6), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 3, 0.45), RefreshReason::kNone);  // below: the streak ends
  EXPECT_EQ(s.drift_streak(), 0);
  EXPECT_EQ(RecordThenDue(s, 4, 0.6), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 5, 1.2), RefreshReason::kNone);  // worse than direct counts too
  EXPECT_EQ(s.drift_streak(), 2);
  s.RecordRatio(std::nan(""));  // ignored: neither counts nor breaks the streak
  EXPECT_EQ(RecordThenDue(s, 6, 0.6), RefreshReason::kDrift);
  EXPECT_EQ(s.Due(7, 0), RefreshReason::kDrift);  // until the refresh is made
  s.MarkRefreshed(7, 0.4, 0);
  EXPECT_EQ(s.Due(8, 0), RefreshReason::kNone);
}

TEST(RefreshScheduleTest, ReferenceSetAfterTheRefresh) {
  RefreshSchedule s = Make({.period_steps = 100, .drift_threshold = 0.2, .drift_patience = 1});
  s.MarkRefreshed(0, std::nullopt, 0);
  EXPECT_FALSE(s.reference_ratio().has_value());
  s.SetReference(0.5);  // e.g. the new basis's first out-of-sample measurement
  EXPECT_EQ(s.reference_ratio(), 0.5);
  EXPECT_EQ(RecordThenDue(s, 3, 0.59), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 3, 0.61), RefreshReason::kDrift);
  s.MarkRefreshed(3, std::nullopt, 0);  // a refresh clears it
  EXPECT_FALSE(s.reference_ratio().has_value());
}

TEST(RefreshScheduleTest, WorseThanDirectCanBeLeftToTheReference) {
  RefreshSchedule s = Make({.period_steps = 100,
                            .drift_threshold = 0.2,
                            .drift_when_worse_than_direct = false,
                            .drift_patience = 1});
  s.MarkRefreshed(0, std::nullopt, 0);
  EXPECT_EQ(RecordThenDue(s, 1, 1.05), RefreshReason::kNone);  // no reference: nothing to compare
  s.SetReference(1.0);
  EXPECT_EQ(RecordThenDue(s, 2, 1.1), RefreshReason::kNone);
  EXPECT_EQ(RecordThenDue(s, 2, 1.3), RefreshReason::kDrift);
}

TEST(RefreshScheduleTest, ZeroThresholdDisablesDrift) {
  RefreshSchedule s = Make({.period_steps = 100, .drift_threshold = 0.0, .drift_patience = 1});
  s.MarkRefreshed(0, 0.1, 0);
  EXPECT_EQ(RecordThenDue(s, 1, 5.0), RefreshReason::kNone);
}

TEST(RefreshScheduleTest, OperatorRequestsAreServedOnce) {
  RefreshSchedule s = Make({.period_steps = 100});
  s.MarkRefreshed(0, 0.3, 0);
  EXPECT_EQ(s.Due(1, 2), RefreshReason::kRequested);
  s.MarkRefreshed(1, 0.3, 2);
  EXPECT_EQ(s.Due(2, 2), RefreshReason::kNone);
  EXPECT_EQ(s.Due(2, 3), RefreshReason::kRequested);
}

TEST(RefreshScheduleTest, CollectPeriod) {
  RefreshSchedule s = Make({.collect_period = 4});
  EXPECT_TRUE(s.ShouldCollect(0));
  EXPECT_FALSE(s.ShouldCollect(1));
  EXPECT_FALSE(s.ShouldCollect(3));
  EXPECT_TRUE(s.ShouldCollect(8));
}

// A refresh that chose direct thins collection out by the stride; one that
// chose a basis (or none yet) collects on every collect step.
TEST(RefreshScheduleTest, DirectTensorsCollectEveryStrideTimesThePeriod) {
  RefreshSchedule s = Make({.collect_period = 2, .direct_collect_stride = 4});
  EXPECT_TRUE(s.ShouldCollect(2));  // no refresh yet: statistics for the first
  s.MarkRefreshed(10, std::nullopt, 0, /*direct=*/true);
  EXPECT_FALSE(s.ShouldCollect(2));
  EXPECT_FALSE(s.ShouldCollect(12));
  EXPECT_TRUE(s.ShouldCollect(16));
  EXPECT_TRUE(s.ShouldCollect(24));
  s.MarkRefreshed(30, 0.4, 0, /*direct=*/false);  // a basis again
  EXPECT_TRUE(s.ShouldCollect(32));
  EXPECT_TRUE(s.ShouldCollect(34));
  RefreshSchedule every = Make({.collect_period = 1, .direct_collect_stride = 1});
  every.MarkRefreshed(1, std::nullopt, 0, /*direct=*/true);
  EXPECT_TRUE(every.ShouldCollect(3));
}

// A back-off stretches the next period and, for a direct choice, the
// collect stride; the refresh after it sets its own.
TEST(RefreshScheduleTest, BackoffStretchesThePeriodAndADirectTensorsCollection) {
  RefreshSchedule s = Make({.period_steps = 10, .collect_period = 2, .direct_collect_stride = 1});
  s.MarkRefreshed(10, std::nullopt, 0, /*direct=*/true, /*backoff=*/4);
  EXPECT_EQ(s.backoff(), 4);
  EXPECT_EQ(s.Due(49, 0), RefreshReason::kNone);
  EXPECT_EQ(s.Due(50, 0), RefreshReason::kPeriod);
  EXPECT_FALSE(s.ShouldCollect(12));
  EXPECT_TRUE(s.ShouldCollect(16));
  s.MarkRefreshed(50, 0.5, 0, /*direct=*/false, /*backoff=*/2);  // a basis: collects as usual
  EXPECT_TRUE(s.ShouldCollect(52));
  EXPECT_EQ(s.Due(69, 0), RefreshReason::kNone);
  EXPECT_EQ(s.Due(70, 0), RefreshReason::kPeriod);
  s.MarkRefreshed(70, std::nullopt, 0, /*direct=*/true, /*backoff=*/0);  // taken as 1
  EXPECT_EQ(s.backoff(), 1);
  EXPECT_EQ(s.Due(80, 0), RefreshReason::kPeriod);
  EXPECT_TRUE(s.ShouldCollect(72));
}

TEST(RefreshScheduleTest, MeasurePeriodAndNoMeasurementWithoutDrift) {
  RefreshSchedule s = Make({.collect_period = 1, .measure_period = 4});
  EXPECT_TRUE(s.ShouldMeasure(0));
  EXPECT_FALSE(s.ShouldMeasure(2));
  EXPECT_TRUE(s.ShouldMeasure(12));
  EXPECT_TRUE(s.ShouldCollect(2));  // independent of collecting
  RefreshSchedule off = Make({.drift_threshold = 0.0, .measure_period = 1});
  EXPECT_FALSE(off.ShouldMeasure(0));
  EXPECT_FALSE(off.ShouldMeasure(5));
}

TEST(RefreshScheduleTest, RejectsBadOptions) {
  EXPECT_FALSE(RefreshSchedule::Create({.period_steps = 0}).ok());
  EXPECT_FALSE(RefreshSchedule::Create({.drift_threshold = -0.1}).ok());
  EXPECT_FALSE(RefreshSchedule::Create({.collect_period = 0}).ok());
  EXPECT_FALSE(RefreshSchedule::Create({.measure_period = 0}).ok());
  EXPECT_FALSE(RefreshSchedule::Create({.direct_collect_stride = 0}).ok());
  EXPECT_FALSE(RefreshSchedule::Create({.drift_patience = 0}).ok());
  EXPECT_EQ(RefreshReasonName(RefreshReason::kDrift), "drift");
}

}  // namespace
}  // namespace gift::transform
