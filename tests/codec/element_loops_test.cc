// The AVX2 inner loops give the same bits as the portable ones.
#include "common/codec/element_loops.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec::internal {
namespace {

// Values that probe every path: all binades from FP32 denormals to huge,
// exact code values, midpoints, and their neighbours.
std::vector<float> NastyValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    switch (i % 4) {
      case 0: break;                                     // any bit pattern...
      case 1: bits = (bits & 0x807FFFFFu) | ((100 + rng() % 60) << 23); break;  // near 1
      case 2: bits &= 0x80FFFFFFu; break;                 // denormals and tiny
      case 3: bits = (bits & 0x80000000u) | ((bits & 0x7FFFFFFFu) % 0x44000000u); break;
    }
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= 0xBFFFFFFFu;  // keep finite
    std::memcpy(&x[i], &bits, 4);
  }
  return x;
}

class ElementLoopsTest : public ::testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
    if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  }
};

TEST_P(ElementLoopsTest, QuantizeMatchesScalar) {
  const Format format = GetParam();
  const size_t n = 4099;  // not a multiple of any vector width
  const std::vector<float> x = NastyValues(n, 11);
  const int bytes = BitsPerElement(format) / 8;
  for (float inv : {1.0f, 0.0f, 1.0f / 3.0f, 1024.0f, 1e-20f, 7.5e15f}) {
    std::vector<uint8_t> a(n * bytes), b(n * bytes);
    ScalarLoops().quantize(format, x.data(), n, inv, nullptr, 0, a.data());
    Avx2Loops()->quantize(format, x.data(), n, inv, nullptr, 0, b.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&a[i * bytes], &b[i * bytes], bytes), 0)
          << "element " << i << " x=" << x[i] << " inv=" << inv;
    }
  }
}

TEST_P(ElementLoopsTest, DequantizeMatchesScalar) {
  const Format format = GetParam();
  const size_t n = 1031;
  const int bytes = BitsPerElement(format) / 8;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(n * bytes);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (float scale : {1.0f, 0.0f, 3.0f, 1e-30f}) {
    for (bool accumulate : {false, true}) {
      std::vector<float> a(n, 0.25f), b(n, 0.25f);
      ScalarLoops().dequantize(format, codes.data(), n, scale, a.data(), accumulate);
      Avx2Loops()->dequantize(format, codes.data(), n, scale, b.data(), accumulate);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << "scale " << scale;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ElementLoopsTest,
                         ::testing::Values(Format::kE4M3, Format::kE5M2, Format::kBf16),
                         [](const auto& info) { return std::string(FormatName(info.param)); });

TEST(ElementLoops, AmaxMatchesScalarAndSeesNonFinite) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  std::vector<float> x = NastyValues(1000, 5);
  for (size_t n : {0u, 1u, 7u, 8u, 33u, 1000u}) {
    EXPECT_EQ(ScalarLoops().amax_bits(x.data(), n), Avx2Loops()->amax_bits(x.data(), n)) << n;
  }
  x[517] = -std::numeric_limits<float>::infinity();
  EXPECT_GE(Avx2Loops()->amax_bits(x.data(), x.size()), scalar::kInfBits);
  x[517] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_GE(Avx2Loops()->amax_bits(x.data(), x.size()), scalar::kInfBits);
}

}  // namespace
}  // namespace gift::codec::internal
