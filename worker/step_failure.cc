#include "worker/step_failure.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace gift::worker {
namespace {

constexpr absl::string_view kFailedAggregatorUrl = "gift.worker/failed-aggregator";
constexpr absl::string_view kPushedUrl = "gift.worker/pushed";

}  // namespace

absl::Status AggregatorFailure(absl::string_view what, absl::string_view address,
                               absl::string_view why) {
  absl::Status s = absl::UnavailableError(absl::StrCat(what, " (", address, "): ", why));
  s.SetPayload(kFailedAggregatorUrl, absl::Cord(address));
  return s;
}

absl::Status WithPushed(absl::Status failure, bool pushed) {
  failure.SetPayload(kPushedUrl, absl::Cord(pushed ? "1" : "0"));
  return failure;
}

StepFailureInfo DescribeStepFailure(const absl::Status& failure) {
  StepFailureInfo info;
  if (auto address = failure.GetPayload(kFailedAggregatorUrl); address.has_value()) {
    info.aggregator = std::string(*address);
  }
  if (auto pushed = failure.GetPayload(kPushedUrl); pushed.has_value()) {
    info.pushed = *pushed != "0";
  }
  return info;
}

}  // namespace gift::worker
