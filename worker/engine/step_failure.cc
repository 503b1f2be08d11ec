#include "worker/engine/step_failure.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/transport/transport.h"

namespace gift::worker {
namespace {

constexpr absl::string_view kFailedAggregatorUrl = "gift.worker/failed-aggregator";
constexpr absl::string_view kPushedUrl = "gift.worker/pushed";

}  // namespace

absl::Status AggregatorFailure(absl::string_view what, absl::string_view address,
                               absl::string_view why) {
  absl::Status s = absl::UnavailableError(
      absl::StrCat(what, " (", transport::DescribeAddress(address), "): ", why));
  s.SetPayload(kFailedAggregatorUrl, absl::Cord(address));
  return s;
}

absl::Status WithPushed(absl::Status failure, bool pushed) {
  failure.SetPayload(kPushedUrl, absl::Cord(pushed ? "1" : "0"));
  return failure;
}

absl::Status InTensor(const absl::Status& s, uint64_t tensor_id, int64_t chunk) {
  if (s.ok()) return s;
  return absl::Status(s.code(), chunk < 0 ? absl::StrCat("tensor ", tensor_id, ": ", s.message())
                                          : absl::StrCat("tensor ", tensor_id, " chunk ", chunk,
                                                         ": ", s.message()));
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
