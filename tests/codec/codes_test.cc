// Code-level facts of each format: every code round-trips, and the rounding
// boundaries (ties to even, subnormals, saturation, signed zero) are right.
#include <cmath>
#include <limits>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/scalar.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

using scalar::Dequantize;
using scalar::MiniFloat;
using testing::Bits;
using testing::FromBits;

uint32_t Rne(const MiniFloat& f, float x) { return scalar::Quantize(f, x, false, 0); }

// Encodes values through the public API without scaling.
std::vector<uint8_t> EncodeUnscaled(const char* spec_name, const std::vector<float>& x,
                                    bool use_simd) {
  auto t = EncodedTensor::Create(testing::Spec(spec_name), 1, x.size()).value();
  CodecOptions options;
  options.use_simd = use_simd;
  EXPECT_TRUE(Encode(x.data(), t.mutable_view(), {}, options).ok());
  return t.codes();
}

struct Fp8Case {
  const char* spec;
  const MiniFloat* format;
  float max;
  float min_subnormal;
  float min_normal;
};

class Fp8CodesTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8CodesTest, Every256CodeDecodesAndReencodesToItself) {
  const Fp8Case& c = GetParam();
  std::vector<float> finite_values;
  std::vector<uint8_t> finite_codes;
  for (uint32_t code = 0; code < 256; ++code) {
    const float v = Dequantize(*c.format, code);
    if (scalar::IsNonFiniteCode(*c.format, code)) {
      EXPECT_FALSE(std::isfinite(v)) << "code " << code;
      continue;
    }
    ASSERT_TRUE(std::isfinite(v)) << "code " << code;
    EXPECT_EQ(Rne(*c.format, v), code) << "code " << code << " value " << v;
    EXPECT_EQ(scalar::Quantize(*c.format, v, true, 0xFFFFFFFFu), code) << "stochastic, exact";
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0);
    finite_values.push_back(v);
    finite_codes.push_back(static_cast<uint8_t>(code));
  }
  // The same through the public encoder, vectorized and portable paths.
  const std::string none = std::string(c.spec) + "/none";
  EXPECT_EQ(EncodeUnscaled(none.c_str(), finite_values, true), finite_codes);
  EXPECT_EQ(EncodeUnscaled(none.c_str(), finite_values, false), finite_codes);
  // Decoding through the public API gives the exact values back.
  auto t = EncodedTensor::Create(testing::Spec(none), 1, finite_codes.size()).value();
  t.codes() = finite_codes;
  std::vector<float> decoded(finite_codes.size());
  ASSERT_TRUE(Decode(t.view(), decoded.data()).ok());
  for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(Bits(decoded[i]), Bits(finite_values[i]));
}

TEST_P(Fp8CodesTest, ExtremesAndSaturation) {
  const Fp8Case& c = GetParam();
  const uint32_t max_code = c.format->max_code;
  EXPECT_EQ(Dequantize(*c.format, max_code), c.max);
  EXPECT_EQ(Dequantize(*c.format, 1), c.min_subnormal);
  EXPECT_EQ(Dequantize(*c.format, 1u << c.format->mbits), c.min_normal);
  // Saturation instead of overflow, for both signs.
  for (float big : {c.max * 1.01f, c.max * 4.0f, 1e30f, std::numeric_limits<float>::max()}) {
    EXPECT_EQ(Rne(*c.format, big), max_code) << big;
    EXPECT_EQ(Rne(*c.format, -big), max_code | 0x80) << big;
    EXPECT_EQ(scalar::Quantize(*c.format, big, true, 0), max_code);
  }
  // The midpoint between max and the next (non-finite) step still saturates.
  const float next_step = FromBits(Bits(c.max) + (1u << (23 - c.format->mbits)));
  EXPECT_EQ(Rne(*c.format, 0.5f * (c.max + next_step)), max_code);
}

TEST_P(Fp8CodesTest, TiesToEvenInNormalAndSubnormalRange) {
  const Fp8Case& c = GetParam();
  for (uint32_t code = 0; code + 1 < c.format->max_code; ++code) {
    const float lo = Dequantize(*c.format, code);
    const float hi = Dequantize(*c.format, code + 1);
    const float mid = 0.5f * (lo + hi);  // exact in FP32
    const uint32_t even = (code % 2 == 0) ? code : code + 1;
    EXPECT_EQ(Rne(*c.format, mid), even) << "tie between codes " << code << " and " << code + 1;
    EXPECT_EQ(Rne(*c.format, -mid), even | 0x80);
    EXPECT_EQ(Rne(*c.format, std::nextafter(mid, 0.0f)), code);
    EXPECT_EQ(Rne(*c.format, std::nextafter(mid, 1e30f)), code + 1);
  }
}

TEST_P(Fp8CodesTest, SignedZeroAndUnderflow) {
  const Fp8Case& c = GetParam();
  EXPECT_EQ(Rne(*c.format, 0.0f), 0x00u);
  EXPECT_EQ(Rne(*c.format, -0.0f), 0x80u);
  EXPECT_TRUE(std::signbit(Dequantize(*c.format, 0x80)));
  EXPECT_EQ(Dequantize(*c.format, 0x80), 0.0f);
  // Half the smallest subnormal is a tie with zero (even): rounds to zero,
  // keeping the sign; just above it rounds up.
  const float half_min = 0.5f * c.min_subnormal;
  EXPECT_EQ(Rne(*c.format, half_min), 0x00u);
  EXPECT_EQ(Rne(*c.format, -half_min), 0x80u);
  EXPECT_EQ(Rne(*c.format, std::nextafter(half_min, 1.0f)), 0x01u);
  EXPECT_EQ(Rne(*c.format, 1e-40f), 0x00u);  // an FP32 denormal
  EXPECT_EQ(Rne(*c.format, -1e-40f), 0x80u);
  EXPECT_EQ(Rne(*c.format, std::numeric_limits<float>::denorm_min()), 0x00u);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Fp8CodesTest,
    ::testing::Values(Fp8Case{"e4m3", &scalar::kE4M3, 448.0f, 0x1p-9f, 0x1p-6f},
                      Fp8Case{"e5m2", &scalar::kE5M2, 57344.0f, 0x1p-16f, 0x1p-14f}),
    [](const auto& info) { return std::string(info.param.spec); });

TEST(Fp8Codes, SpecialCodes) {
  EXPECT_TRUE(std::isnan(Dequantize(scalar::kE4M3, 0x7F)));
  EXPECT_TRUE(std::isnan(Dequantize(scalar::kE4M3, 0xFF)));
  EXPECT_EQ(Dequantize(scalar::kE5M2, 0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Dequantize(scalar::kE5M2, 0xFC), -std::numeric_limits<float>::infinity());
  for (uint32_t c : {0x7Du, 0x7Eu, 0x7Fu, 0xFDu})
    EXPECT_TRUE(std::isnan(Dequantize(scalar::kE5M2, c)));
  EXPECT_EQ(Dequantize(scalar::kE4M3, 0x38), 1.0f);
  EXPECT_EQ(Dequantize(scalar::kE5M2, 0x3C), 1.0f);
}

TEST(Fp4Codes, AllSixteenCodesAndTies) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    const float v = Dequantize(scalar::kE2M1, c);
    EXPECT_EQ(std::fabs(v), values[c & 7]) << c;
    EXPECT_EQ(std::signbit(v), (c & 8) != 0) << c;
    EXPECT_EQ(Rne(scalar::kE2M1, v), c) << c;
  }
  // Midpoints go to the even code.
  EXPECT_EQ(Rne(scalar::kE2M1, 0.25f), 0u);
  EXPECT_EQ(Rne(scalar::kE2M1, 0.75f), 2u);
  EXPECT_EQ(Rne(scalar::kE2M1, 1.25f), 2u);
  EXPECT_EQ(Rne(scalar::kE2M1, 1.75f), 4u);
  EXPECT_EQ(Rne(scalar::kE2M1, 2.5f), 4u);
  EXPECT_EQ(Rne(scalar::kE2M1, 3.5f), 6u);
  EXPECT_EQ(Rne(scalar::kE2M1, 5.0f), 6u);
  EXPECT_EQ(Rne(scalar::kE2M1, 7.0f), 7u);  // saturates
  EXPECT_EQ(Rne(scalar::kE2M1, -100.0f), 15u);
}

TEST(Bf16Codes, EveryFiniteCodeRoundTrips) {
  std::vector<float> values;
  std::vector<uint16_t> codes;
  for (uint32_t c = 0; c < 65536; ++c) {
    const float v = Dequantize(scalar::kBf16, c);
    EXPECT_EQ(Bits(v), c << 16);
    if (scalar::IsNonFiniteCode(scalar::kBf16, c)) {
      EXPECT_FALSE(std::isfinite(v));
      continue;
    }
    ASSERT_EQ(Rne(scalar::kBf16, v), c);
    values.push_back(v);
    codes.push_back(static_cast<uint16_t>(c));
  }
  for (bool simd : {true, false}) {
    const std::vector<uint8_t> bytes = EncodeUnscaled("bf16", values, simd);
    ASSERT_EQ(bytes.size(), 2 * codes.size());
    EXPECT_EQ(std::memcmp(bytes.data(), codes.data(), bytes.size()), 0) << "simd " << simd;
  }
  // Ties to even, and saturation at the largest finite bf16.
  EXPECT_EQ(Rne(scalar::kBf16, FromBits(0x3F808000u)), 0x3F80u);
  EXPECT_EQ(Rne(scalar::kBf16, FromBits(0x3F818000u)), 0x3F82u);
  EXPECT_EQ(Rne(scalar::kBf16, std::numeric_limits<float>::max()), 0x7F7Fu);
  EXPECT_EQ(Rne(scalar::kBf16, -0.0f), 0x8000u);
}

TEST(Scales, E8M0IsTheSmallestPowerOfTwoThatAvoidsSaturation) {
  const float max = 448.0f;
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(448.0f), max), 127u);  // 2^0
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(449.0f), max), 128u);  // 2^1
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(896.0f), max), 128u);
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(224.0f), max), 126u);
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(225.0f), max), 127u);
  EXPECT_EQ(scalar::E8M0FromAmax(0, max), 127u);
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(1e-40f), max), 1u);          // clamped to 2^-126
  EXPECT_EQ(scalar::E8M0FromAmax(Bits(3e38f), max), 127u + 120u);  // 448 * 2^120 >= 3e38
  for (uint32_t code = 1; code < 254; ++code) {
    EXPECT_EQ(scalar::E8M0ToFloat(code) * scalar::E8M0Inverse(code), 1.0f);
  }
}

TEST(Scales, Fp32ScaleKeepsItsReciprocalFinite) {
  EXPECT_EQ(scalar::ScaleFromAmax(0, 448.0f), 0.0f);
  EXPECT_EQ(scalar::InverseScale(0.0f), 0.0f);
  EXPECT_EQ(scalar::ScaleFromAmax(Bits(448.0f), 448.0f), 1.0f);
  const float tiny = scalar::ScaleFromAmax(Bits(1e-40f), 448.0f);
  EXPECT_EQ(tiny, std::numeric_limits<float>::min());
  EXPECT_TRUE(std::isfinite(scalar::InverseScale(tiny)));
  EXPECT_TRUE(std::isfinite(
      scalar::InverseScale(scalar::ScaleFromAmax(Bits(std::numeric_limits<float>::max()), 6.0f))));
}

}  // namespace
}  // namespace gift::codec
