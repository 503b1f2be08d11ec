// When a basis owner collects statistics for a tensor and when it rebuilds
// (refreshes) the tensor's basis.
//
//   collect:  on steps that are multiples of collect_period; once a refresh
//             left the tensor direct (MarkRefreshed with direct), on
//             multiples of collect_period x direct_collect_stride only:
//             its statistics then feed only the next refresh's candidates;
//   refresh:  the first time statistics exist (kFirst); then every
//             period_steps steps after the last refresh (kPeriod); sooner
//             when the measured benefit drifts (kDrift) or an operator asked
//             (kRequested, a counter from the coordinator's cluster state).
//
// Drift: the owner measures, on steps that are multiples of measure_period
// (ShouldMeasure), ratio = error of its own
// gradient quantized through the current basis / error of direct
// quantization (transform_selector.h), and records it (RecordRatio). A
// measurement is above the bar when
//   ratio > reference * (1 + drift_threshold)
// or the current basis has become worse than direct (ratio >= 1, unless
// options say otherwise). A refresh is due early when drift_patience
// measurements in a row were above the bar: one step's ratio is noisy (a
// single measurement against a 20 % bar rebuilt a demo run's bases every
// few steps, most of them on noise). The reference is the ratio given to
// MarkRefreshed, or the one SetReference records later (e.g. the first
// measurement of the new basis once it is active). A drift_threshold of 0
// disables drift refreshes.
//
//   RefreshSchedule schedule(*RefreshSchedule::Create({.period_steps = 10}));
//   if (schedule.ShouldCollect(step)) { ... update statistics ... }
//   if (ratio) schedule.RecordRatio(*ratio);
//   if (auto why = schedule.Due(step, requests); why != RefreshReason::kNone) {
//     ... build and publish a new basis ...
//     schedule.MarkRefreshed(step, new_ratio, requests);
//   }
//
// Thread safety: thread-compatible (const methods may run concurrently;
// MarkRefreshed needs exclusion).
#ifndef GIFT_COMMON_TRANSFORM_REFRESH_SCHEDULE_H_
#define GIFT_COMMON_TRANSFORM_REFRESH_SCHEDULE_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::transform {

struct RefreshScheduleOptions {
  int64_t period_steps = 10;     // >= 1
  double drift_threshold = 0.2;  // >= 0; 0 disables drift refreshes
  int64_t collect_period = 1;    // >= 1
  // >= 1: how much rarer collection is while the last refresh chose direct
  // quantization (see above; the policy's transform.direct_collect_stride).
  int64_t direct_collect_stride = 1;
  // Drift measurements on multiples of this (>= 1). Each costs the owner a
  // forward and inverse transform and two encodes of its own gradient, as
  // much as the tensor's own push and pull.
  int64_t measure_period = 1;
  // Whether a ratio >= 1 (the basis is worse than direct) is drift whatever
  // the reference. Off for tensors that are transformed whatever the
  // measurement says (selection forced by policy): near 1 it would only
  // refresh on noise.
  bool drift_when_worse_than_direct = true;
  // >= 1: how many measurements in a row must be above the bar.
  int64_t drift_patience = 3;
};

// Values may be logged and exported; never renumber.
enum class RefreshReason : uint8_t {
  kNone = 0,
  kFirst = 1,      // no basis yet
  kPeriod = 2,     // period_steps since the last refresh
  kDrift = 3,      // the measured benefit fell
  kRequested = 4,  // an operator's refresh request
};

// "none", "first", "period", "drift", "requested".
absl::string_view RefreshReasonName(RefreshReason reason);

class RefreshSchedule {
 public:
  // InvalidArgument on an option out of its range.
  static absl::StatusOr<RefreshSchedule> Create(const RefreshScheduleOptions& options);

  const RefreshScheduleOptions& options() const { return options_; }

  bool ShouldCollect(uint64_t step) const;
  // Whether drift is measured at `step` (never when drift is disabled).
  bool ShouldMeasure(uint64_t step) const;

  // Records a measured GIFT / direct error ratio of the current basis
  // (non-finite values are ignored).
  void RecordRatio(double ratio);
  // How many recorded measurements in a row, up to the last, were above the
  // bar since the last refresh.
  int64_t drift_streak() const { return drift_streak_; }

  // Whether a refresh is due at `step`, and why (the first reason in the
  // order requested, first, drift, period). `refresh_requests` is the
  // coordinator's counter for the tensor.
  RefreshReason Due(uint64_t step, uint64_t refresh_requests) const;

  // Records a refresh at `step`; `ratio` is the new basis's measured ratio
  // (the drift reference), if it was measured; `refresh_requests` the
  // counter served; `direct` whether it chose direct quantization (then
  // collection thins out, see above). The drift streak starts over.
  // `backoff` (>= 1; 0 is taken as 1) multiplies the period until the next
  // refresh and, with `direct`, the collect stride: an owner whose refresh
  // found nothing worth sending another way does its fixed work that much
  // less often (the fidelity target, docs/design.md 3.7).
  void MarkRefreshed(uint64_t step, std::optional<double> ratio, uint64_t refresh_requests,
                     bool direct = false, int64_t backoff = 1);
  int64_t backoff() const { return backoff_; }

  // Sets the drift reference of the current basis (after MarkRefreshed).
  void SetReference(double ratio) { reference_ratio_ = ratio; }
  std::optional<double> reference_ratio() const { return reference_ratio_; }

  std::optional<uint64_t> last_refresh_step() const { return last_refresh_step_; }

 private:
  explicit RefreshSchedule(const RefreshScheduleOptions& options) : options_(options) {}

  RefreshScheduleOptions options_;
  std::optional<uint64_t> last_refresh_step_;
  std::optional<double> reference_ratio_;
  uint64_t requests_served_ = 0;
  bool direct_ = false;  // the last refresh chose direct quantization
  int64_t backoff_ = 1;
  int64_t drift_streak_ = 0;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_REFRESH_SCHEDULE_H_
