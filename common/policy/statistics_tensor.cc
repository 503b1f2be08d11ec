#include "common/policy/statistics_tensor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/payload.h"
#include "common/policy/policy.h"

namespace gift::policy {
namespace {

constexpr absl::string_view kMarker = "#sketch.";

}  // namespace

std::string StatisticsTensorName(absl::string_view tensor, absl::string_view sides,
                                 uint32_t columns) {
  if (columns == kDefaultStatisticsColumns) return absl::StrCat(tensor, kMarker, sides);
  return absl::StrCat(tensor, kMarker, sides, ".k", columns);
}

bool IsStatisticsTensorName(absl::string_view name) { return absl::StrContains(name, kMarker); }

absl::StatusOr<uint64_t> StatisticsWireBytes(const codec::CodecSpec& spec, uint64_t floats) {
  if (floats == 0) return 0;
  const uint64_t shape[] = {StatisticsRows(floats), static_cast<uint64_t>(kStatisticsColumns)};
  GIFT_ASSIGN_OR_RETURN(const uint64_t one_way, codec::PayloadSizeFor(spec, shape));
  return 2 * one_way;
}

double WireNoise(const codec::CodecSpec& spec, double ema_decay) {
  const double unit = spec.format == codec::Format::kF32
                          ? std::ldexp(1.0, -24)
                          : codec::ElementErrorBound(spec.format, codec::Rounding::kNearestEven,
                                                     /*scale=*/1.0, /*x=*/1.0);
  if (spec.rounding != codec::Rounding::kStochastic) return unit;
  const double d = std::clamp(ema_decay, 0.0, 1.0);
  return unit * std::sqrt((1.0 - d) / (1.0 + d));
}

}  // namespace gift::policy
