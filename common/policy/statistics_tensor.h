// Statistics tensors: the derived FP32 tensors that carry a tensor's
// per-worker sketches over the data path (worker/owner/sketch_exchange.h),
// named "<tensor>#sketch.<sides>" and shaped [1, rows, kStatisticsColumns].
// What every side needs to agree on about them: how they are named, how a
// contribution of n floats is laid out, which codec they travel in (the
// policy's transform.statistics_codec both ways, ResolveTensorSettings) and
// what that costs on the wire.
//
// Thread safety: stateless functions.
#ifndef GIFT_COMMON_POLICY_STATISTICS_TENSOR_H_
#define GIFT_COMMON_POLICY_STATISTICS_TENSOR_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/codec/codec_spec.h"

namespace gift::policy {

// The last dimension of every statistics tensor.
inline constexpr int64_t kStatisticsColumns = 128;

// "<tensor>#sketch.<sides>" for `sides` "both", "input" or "output", and
// "<tensor>#sketch.<sides>.k<columns>" for sketches of other than
// kDefaultStatisticsColumns columns (policy.h): the name fixes the tensor's
// shape, so a tensor whose sketch size changes gets a new statistics tensor.
std::string StatisticsTensorName(absl::string_view tensor, absl::string_view sides,
                                 uint32_t columns);

// Whether `name` is a statistics tensor's (it holds "#sketch.").
bool IsStatisticsTensorName(absl::string_view name);

// Rows of the statistics tensor that holds `floats` values (zero padded to
// whole rows of kStatisticsColumns).
inline uint64_t StatisticsRows(uint64_t floats) {
  return (floats + kStatisticsColumns - 1) / kStatisticsColumns;
}

// The bytes one worker moves per collect step for a contribution of
// `floats` values travelling in `spec` both ways: its push payload plus the
// pull payload of the average, each the whole statistics tensor (the shard
// map cuts it into chunks of whole rows; their headers are not counted).
// Errors: PayloadSizeFor's (an invalid spec).
absl::StatusOr<uint64_t> StatisticsWireBytes(const codec::CodecSpec& spec, uint64_t floats);

// The relative rounding error of statistics that travelled in `spec` and
// are folded into an EMA with `ema_decay` (SketchedMomentEma's noise): the
// format's unit roundoff (the error bound of a value of 1 at scale 1, 2^-24
// for fp32), and for stochastic rounding, which averages out over the EMA's
// steps, that times sqrt((1 - decay) / (1 + decay)), the steady-state
// spread of an EMA of independent errors (0.16 at decay 0.95).
double WireNoise(const codec::CodecSpec& spec, double ema_decay);

}  // namespace gift::policy

#endif  // GIFT_COMMON_POLICY_STATISTICS_TENSOR_H_
