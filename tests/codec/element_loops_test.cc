// The AVX2 inner loops give the same bits as the portable ones.
#include "common/codec/element_loops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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
      case 0:
        break;  // any bit pattern
      case 1:
        bits = (bits & 0x807FFFFFu) | ((100 + rng() % 60) << 23);
        break;  // near 1
      case 2:
        bits &= 0x80FFFFFFu;
        break;  // FP32 denormals and tiny normals
      case 3:
        bits = (bits & 0x80000000u) | ((bits & 0x7FFFFFFFu) % 0x44000000u);
        break;
    }
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= 0xBFFFFFFFu;  // keep finite
    std::memcpy(&x[i], &bits, 4);
  }
  return x;
}

struct LoopCase {
  Format format;
  size_t block;  // 0: one scale for the whole run
  bool stochastic;
  uint64_t first;
};

class ElementLoopsTest : public ::testing::TestWithParam<LoopCase> {
 protected:
  void SetUp() override {
    if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  }
};

size_t CodeBytes(Format format, size_t n) {
  return format == Format::kNvfp4 ? (n + 1) / 2 : n * (BitsPerElement(format) / 8);
}

TEST_P(ElementLoopsTest, QuantizeMatchesScalar) {
  const LoopCase& c = GetParam();
  const StochasticStream stream{scalar::MakePhiloxKey(77, 3), 12345};
  const StochasticStream* sr = c.stochastic ? &stream : nullptr;
  for (size_t n : {1u, 31u, 32u, 33u, 4099u}) {
    const std::vector<float> x = NastyValues(n, 11);
    const size_t block = c.block ? c.block : n;
    for (float inv0 : {1.0f, 0.0f, 1.0f / 3.0f, 1024.0f, 1e-20f, 7.5e15f}) {
      std::vector<float> inv((n + block - 1) / block);
      for (size_t b = 0; b < inv.size(); ++b) inv[b] = inv0 * (b % 3 == 0 ? 1.0f : 0.37f);
      std::vector<uint8_t> a(CodeBytes(c.format, n)), v(a.size());
      ScalarLoops().quantize(c.format, x.data(), n, block, inv.data(), sr, c.first, a.data());
      Avx2Loops()->quantize(c.format, x.data(), n, block, inv.data(), sr, c.first, v.data());
      ASSERT_EQ(a, v) << "n " << n << " inv " << inv0;
    }
  }
}

TEST_P(ElementLoopsTest, DequantizeMatchesScalar) {
  const LoopCase& c = GetParam();
  const size_t n = 1031;
  const size_t block = c.block ? c.block : n;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(CodeBytes(c.format, n));
  for (auto& b : codes) b = static_cast<uint8_t>(rng());
  for (float scale0 : {1.0f, 0.0f, 3.0f, 1e-30f}) {
    std::vector<float> scale((n + block - 1) / block);
    for (size_t b = 0; b < scale.size(); ++b) scale[b] = scale0 * (b % 2 ? 1.0f : 0.5f);
    for (bool accumulate : {false, true}) {
      std::vector<float> a(n, 0.25f), v(n, 0.25f);
      ScalarLoops().dequantize(c.format, codes.data(), n, block, scale.data(), a.data(),
                               accumulate);
      Avx2Loops()->dequantize(c.format, codes.data(), n, block, scale.data(), v.data(), accumulate);
      ASSERT_EQ(std::memcmp(a.data(), v.data(), n * 4), 0) << "scale " << scale0;
    }
  }
}

std::vector<LoopCase> Cases() {
  std::vector<LoopCase> cases;
  for (Format f : {Format::kE4M3, Format::kE5M2, Format::kBf16, Format::kNvfp4}) {
    for (size_t block : {size_t{0}, size_t{16}, size_t{32}, size_t{128}, size_t{12}}) {
      for (bool sr : {false, true}) {
        for (uint64_t first : {uint64_t{0}, uint64_t{1} << 33, uint64_t{6}}) {
          cases.push_back({f, block, sr, first});
        }
      }
    }
  }
  // FP32 is a copy: only unscaled and round-to-nearest (Validate refuses the rest).
  for (uint64_t first : {uint64_t{0}, uint64_t{6}})
    cases.push_back({Format::kF32, 0, false, first});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, ElementLoopsTest, ::testing::ValuesIn(Cases()), [](const auto& info) {
  const LoopCase& c = info.param;
  return std::string(FormatName(c.format)) + "_block" + std::to_string(c.block) +
         (c.stochastic ? "_sr" : "_rne") + "_first" + std::to_string(c.first % 1000);
});

// The FP8 decode (through F16C where the CPU has it) on every code, at every
// offset within a 16-element step, with blocks of 8 (two scales per step)
// and scales whose products overflow, round to FP32 denormals, or are zero.
TEST(ElementLoops, Fp8DequantizeEveryCodeMatchesScalar) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  const size_t n = 256 * 17 + 5;
  std::vector<uint8_t> codes(n);
  for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(i % 256 + i / 256);
  // 0x1p120f and up: where folding 2^8 into an E4M3 scale would overflow.
  const float scales[] = {1.0f, 0.0f, -2.0f, 0x1p126f, 3.4e38f, 0x1p120f, 0x1.fffffep119f,
                          -0x1p120f, 0x1p-126f, 0x1p-149f, 1e-30f, std::nanf(""),
                          std::numeric_limits<float>::infinity()};
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (size_t block : {size_t{8}, size_t{16}, size_t{128}, n}) {
      for (float s0 : scales) {
        std::vector<float> scale((n + block - 1) / block);
        for (size_t b = 0; b < scale.size(); ++b) scale[b] = b % 3 == 1 ? 0.75f * s0 : s0;
        for (bool accumulate : {false, true}) {
          std::vector<float> a(n, -1.5f), v(n, -1.5f);
          ScalarLoops().dequantize(f, codes.data(), n, block, scale.data(), a.data(), accumulate);
          Avx2Loops()->dequantize(f, codes.data(), n, block, scale.data(), v.data(), accumulate);
          ASSERT_EQ(std::memcmp(a.data(), v.data(), n * 4), 0)
              << FormatName(f) << " block " << block << " scale " << s0 << " acc " << accumulate;
        }
      }
    }
  }
}

// bf16 nearest-even encoding (its own AVX2 path) on bit patterns at every
// rounding boundary: ties, the largest finite values, Inf, NaNs of any
// payload, zeros and FP32 denormals, with both signs.
TEST(ElementLoops, Bf16QuantizeSpecialBitsMatchScalar) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  std::vector<uint32_t> bits;
  for (uint32_t hi : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x3F80u, 0x3F81u, 0x7F7Eu, 0x7F7Fu,
                      0x7F80u, 0x7FC0u, 0x7FFFu}) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      bits.push_back(hi << 16 | lo);
      bits.push_back(0x80000000u | hi << 16 | lo);
    }
  }
  std::mt19937 rng(5);
  while (bits.size() % 32 != 7) bits.push_back(rng());  // vector body and a scalar tail
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), 4 * bits.size());
  const size_t n = x.size();
  for (float inv : {1.0f, 0.5f, 3.0f}) {
    std::vector<uint8_t> a(2 * n), v(2 * n);
    ScalarLoops().quantize(Format::kBf16, x.data(), n, n, &inv, nullptr, 0, a.data());
    Avx2Loops()->quantize(Format::kBf16, x.data(), n, n, &inv, nullptr, 0, v.data());
    ASSERT_EQ(a, v) << "inv " << inv;
  }
}

TEST(ElementLoops, BlockAmaxMatchesScalarAndSeesNonFinite) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  std::vector<float> x = NastyValues(4099, 5);
  for (size_t n : {1u, 7u, 8u, 33u, 1000u, 4099u}) {
    for (size_t block : {n, size_t{16}, size_t{32}, size_t{128}, size_t{5}}) {
      std::vector<uint32_t> a((n + block - 1) / block), v(a.size());
      ScalarLoops().block_amax(x.data(), n, block, a.data());
      Avx2Loops()->block_amax(x.data(), n, block, v.data());
      EXPECT_EQ(a, v) << n << " " << block;
    }
  }
  uint32_t m;
  x[517] = -std::numeric_limits<float>::infinity();
  Avx2Loops()->block_amax(x.data(), x.size(), x.size(), &m);
  EXPECT_GE(m, scalar::kInfBits);
  x[517] = std::numeric_limits<float>::quiet_NaN();
  Avx2Loops()->block_amax(x.data(), x.size(), x.size(), &m);
  EXPECT_GE(m, scalar::kInfBits);
}

TEST(ElementLoops, BlockScalesMatchScalar) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  std::mt19937 rng(21);
  const size_t n = 203;
  std::vector<uint32_t> amax(n);
  for (size_t j = 0; j < n; ++j) {
    // Every exponent from zero and denormals to the largest finite values.
    amax[j] = j % 17 == 0 ? 0u : (rng() & 0x7FFFFFFFu) % 0x7F800000u;
  }
  for (size_t j : {5u, 6u, 7u, 40u}) amax[j] = static_cast<uint32_t>(j * 0x1FFFF);  // denormals
  for (const char* name : {"e4m3/block32", "e5m2/block128", "e4m3/mx32", "nvfp4"}) {
    const CodecSpec spec = ParseCodecSpec(name).value();
    for (uint32_t tensor_amax : {0x7F7FFFFFu, 0x3F800000u, 0x00000001u}) {
      const float g = scalar::Nvfp4TensorScale(tensor_amax);
      // For nvfp4 keep the block amaxes at or below the tensor's.
      std::vector<uint32_t> a = amax;
      if (spec.scaling == Scaling::kNvfp4) {
        for (uint32_t& v : a) v = v % (tensor_amax + 1);
      }
      std::vector<uint8_t> s1(4 * n), s2(4 * n);
      std::vector<float> i1(n), i2(n);
      ScalarLoops().block_scales(spec, a.data(), n, g, 1.0f / g, s1.data(), i1.data());
      Avx2Loops()->block_scales(spec, a.data(), n, g, 1.0f / g, s2.data(), i2.data());
      EXPECT_EQ(s1, s2) << name;
      EXPECT_EQ(std::memcmp(i1.data(), i2.data(), 4 * n), 0) << name;
    }
  }
}

TEST(ElementLoops, FittedNvfp4ScalesMatchScalar) {
  if (Avx2Loops() == nullptr) GTEST_SKIP() << "CPU has no AVX2";
  for (const size_t n : {size_t{16}, size_t{1000}, size_t{8192}, size_t{37}}) {
    const std::vector<float> x = testing::GradientLike(1, n, static_cast<uint32_t>(n));
    uint32_t tensor_amax = 0;
    for (float v : x) tensor_amax = std::max(tensor_amax, testing::Bits(v) & scalar::kAbsMask);
    const float g = scalar::Nvfp4TensorScale(tensor_amax);
    const size_t blocks = (n + 15) / 16;
    std::vector<uint32_t> amax(blocks);
    ScalarLoops().block_amax(x.data(), n, 16, amax.data());
    const CodecSpec spec = ParseCodecSpec("nvfp4").value();
    std::vector<uint8_t> s1(blocks);
    std::vector<float> i1(blocks);
    ScalarLoops().block_scales(spec, amax.data(), blocks, g, 1.0f / g, s1.data(), i1.data());
    std::vector<uint8_t> s2 = s1;
    std::vector<float> i2 = i1;
    const std::vector<uint8_t> before = s1;
    ScalarLoops().fit_nvfp4_scales(x.data(), n, g, s1.data(), i1.data());
    Avx2Loops()->fit_nvfp4_scales(x.data(), n, g, s2.data(), i2.data());
    EXPECT_EQ(s1, s2) << n;
    EXPECT_EQ(std::memcmp(i1.data(), i2.data(), 4 * blocks), 0) << n;
    if (n >= 1000) EXPECT_NE(s1, before) << "some block took a lower scale";
  }
}

}  // namespace
}  // namespace gift::codec::internal
