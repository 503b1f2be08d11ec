#include "common/policy/statistics_tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/policy/policy.h"

namespace gift::policy {
namespace {

codec::CodecSpec Spec(const char* text) { return *codec::ParseCodecSpec(text); }

TEST(StatisticsTensorTest, NamesAreMarkedAndRecognised) {
  EXPECT_EQ(StatisticsTensorName("layers.0.w", "both", kDefaultStatisticsColumns),
            "layers.0.w#sketch.both");
  EXPECT_EQ(StatisticsTensorName("layers.0.w", "output", 64), "layers.0.w#sketch.output.k64");
  EXPECT_TRUE(IsStatisticsTensorName("layers.0.w#sketch.output.k64"));
  EXPECT_TRUE(IsStatisticsTensorName("layers.0.w#sketch.output"));
  EXPECT_FALSE(IsStatisticsTensorName("layers.0.w"));
  EXPECT_FALSE(IsStatisticsTensorName("layers.0.w#sketch"));
}

TEST(StatisticsTensorTest, RowsArePaddedToWholeRowsOf128) {
  EXPECT_EQ(StatisticsRows(0), 0u);
  EXPECT_EQ(StatisticsRows(1), 1u);
  EXPECT_EQ(StatisticsRows(128), 1u);
  EXPECT_EQ(StatisticsRows(129), 2u);
}

// A 1024-wide side with k = 128: 1024 * 129 + 1 = 132,097 values, 1,033
// rows of 128 (132,224 values with the padding). Payload header: 48 bytes
// and 8 per dimension (payload.h).
TEST(StatisticsTensorTest, WireBytesAreBothWaysOfTheWholePaddedTensor) {
  constexpr uint64_t kValues = 1024 * 129 + 1, kPadded = 1033 * 128, kHeader = 48 + 2 * 8;
  EXPECT_EQ(*StatisticsWireBytes(Spec("bf16"), kValues), 2 * (kHeader + 2 * kPadded));
  EXPECT_EQ(*StatisticsWireBytes(Spec("fp32"), kValues), 2 * (kHeader + 4 * kPadded));
  // E4M3 block-128: a byte a value and one FP32 scale per row; the codes
  // start on an 8-byte boundary after the scales.
  const uint64_t shape[] = {1033, 128};
  const uint64_t e4m3 = *codec::PayloadSizeFor(Spec("e4m3/block128"), shape);
  EXPECT_EQ(*StatisticsWireBytes(Spec("e4m3/block128"), kValues), 2 * e4m3);
  EXPECT_GE(e4m3, kHeader + kPadded + 4 * 1033);
  EXPECT_LE(e4m3, kHeader + kPadded + 4 * 1033 + 8);
  // Half of BF16's, less a little for the scales.
  EXPECT_LT(*StatisticsWireBytes(Spec("e4m3/block128"), kValues),
            *StatisticsWireBytes(Spec("bf16"), kValues) * 52 / 100);
  EXPECT_EQ(*StatisticsWireBytes(Spec("bf16"), 0), 0u);
}

TEST(StatisticsTensorTest, WireNoiseIsTheUnitRoundoffLessWhatTheEmaAveragesOut) {
  EXPECT_DOUBLE_EQ(WireNoise(Spec("fp32"), 0.95), std::ldexp(1.0, -24));
  // The bound at 1 carries a few FP32 roundings (2^-21) besides the format's.
  EXPECT_NEAR(WireNoise(Spec("bf16"), 0.95), std::ldexp(1.0, -8), 1e-6);
  EXPECT_NEAR(WireNoise(Spec("e4m3/block128"), 0.95), 0.0625, 1e-6);
  // Stochastic rounding: sqrt(0.05 / 1.95) of it at decay 0.95.
  EXPECT_NEAR(WireNoise(Spec("e4m3/block128/sr"), 0.95), 0.0625 * std::sqrt(0.05 / 1.95), 1e-6);
  EXPECT_NEAR(WireNoise(Spec("e4m3/block128/sr"), 0.0), 0.0625, 1e-6);
}

}  // namespace
}  // namespace gift::policy
