#include "common/transform/refresh_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gift::transform {

absl::string_view RefreshReasonName(RefreshReason reason) {
  switch (reason) {
    case RefreshReason::kNone:
      return "none";
    case RefreshReason::kFirst:
      return "first";
    case RefreshReason::kPeriod:
      return "period";
    case RefreshReason::kDrift:
      return "drift";
    case RefreshReason::kRequested:
      return "requested";
  }
  return "unknown";
}

absl::StatusOr<RefreshSchedule> RefreshSchedule::Create(const RefreshScheduleOptions& options) {
  if (options.period_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("refresh period ", options.period_steps, " steps is not >= 1"));
  }
  if (!(options.drift_threshold >= 0.0) || !std::isfinite(options.drift_threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("drift threshold ", options.drift_threshold, " is not a finite value >= 0"));
  }
  if (options.collect_period < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("collect period ", options.collect_period, " steps is not >= 1"));
  }
  // The policy bounds the collect period far below 2^43, so the product
  // with the stride stays in range.
  if (options.direct_collect_stride < 1 || options.direct_collect_stride > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "direct collect stride ", options.direct_collect_stride, " is not in [1, 2^20]"));
  }
  if (options.measure_period < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("measure period ", options.measure_period, " steps is not >= 1"));
  }
  if (options.drift_patience < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("drift patience ", options.drift_patience, " is not >= 1"));
  }
  return RefreshSchedule(options);
}

bool RefreshSchedule::ShouldCollect(uint64_t step) const {
  const int64_t stride = direct_ ? options_.direct_collect_stride * backoff_ : 1;
  return step % static_cast<uint64_t>(options_.collect_period * stride) == 0;
}

bool RefreshSchedule::ShouldMeasure(uint64_t step) const {
  return options_.drift_threshold > 0.0 &&
         step % static_cast<uint64_t>(options_.measure_period) == 0;
}

void RefreshSchedule::RecordRatio(double ratio) {
  if (options_.drift_threshold <= 0.0 || !std::isfinite(ratio)) return;
  const bool worse_than_direct = options_.drift_when_worse_than_direct && ratio >= 1.0;
  const bool drifted =
      reference_ratio_.has_value() && ratio > *reference_ratio_ * (1.0 + options_.drift_threshold);
  drift_streak_ = worse_than_direct || drifted ? drift_streak_ + 1 : 0;
}

RefreshReason RefreshSchedule::Due(uint64_t step, uint64_t refresh_requests) const {
  if (refresh_requests > requests_served_) return RefreshReason::kRequested;
  if (!last_refresh_step_.has_value()) return RefreshReason::kFirst;
  if (drift_streak_ >= options_.drift_patience) return RefreshReason::kDrift;
  if (step >= *last_refresh_step_ + static_cast<uint64_t>(options_.period_steps * backoff_)) {
    return RefreshReason::kPeriod;
  }
  return RefreshReason::kNone;
}

void RefreshSchedule::MarkRefreshed(uint64_t step, std::optional<double> ratio,
                                    uint64_t refresh_requests, bool direct, int64_t backoff) {
  last_refresh_step_ = step;
  direct_ = direct;
  backoff_ = std::max<int64_t>(backoff, 1);
  reference_ratio_ = ratio;
  drift_streak_ = 0;
  if (refresh_requests > requests_served_) requests_served_ = refresh_requests;
}

}  // namespace gift::transform
