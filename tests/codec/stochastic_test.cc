// Stochastic rounding is unbiased, reproducible from its key, and stays
// within one spacing.
#include <cmath>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/scalar.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

std::vector<float> EncodeDecode(const CodecSpec& spec, const std::vector<float>& x, uint64_t rows,
                                const RngKey& key, std::vector<uint8_t>* codes = nullptr) {
  const uint64_t cols = x.size() / rows;
  auto t = EncodedTensor::Create(spec, rows, cols).value();
  EXPECT_TRUE(Encode(x.data(), t.mutable_view(), key).ok());
  std::vector<float> y(x.size());
  EXPECT_TRUE(Decode(t.view(), y.data()).ok());
  if (codes) *codes = t.codes();
  return y;
}

struct SrCase {
  const char* spec;
  float value;   // a value between two codes (unscaled formats), or
  float anchor;  // for block formats: a value fixing each block's scale
};

class StochasticBiasTest : public ::testing::TestWithParam<SrCase> {};

// The mean of many independent stochastic roundings of one value converges
// to the value: |mean - x| stays within 5 standard errors (the variance of
// a rounding between neighbours at distance d is at most d^2 / 4).
TEST_P(StochasticBiasTest, MeanErrorWithinStatisticalBound) {
  const SrCase& c = GetParam();
  const CodecSpec spec = testing::Spec(c.spec);
  const uint64_t cols = spec.block_size ? spec.block_size : 64;
  const uint64_t rows = 8192;
  std::vector<float> x(rows * cols, c.value);
  if (c.anchor != 0.0f) {
    for (uint64_t r = 0; r < rows; ++r) x[r * cols] = c.anchor;
  }
  double sum = 0.0, lo = 1e300, hi = -1e300;
  uint64_t count = 0;
  for (uint64_t step = 0; step < 4; ++step) {
    const std::vector<float> y = EncodeDecode(spec, x, rows, RngKey{5, step, 2});
    for (uint64_t i = 0; i < y.size(); ++i) {
      if (c.anchor != 0.0f && i % cols == 0) continue;
      sum += y[i];
      lo = std::min<double>(lo, y[i]);
      hi = std::max<double>(hi, y[i]);
      ++count;
    }
  }
  const double mean = sum / count;
  const double spacing = hi - lo;  // the two neighbours of the value
  ASSERT_GT(spacing, 0.0) << "the value must fall between two codes";
  const double stderr_bound = 0.5 * spacing / std::sqrt(static_cast<double>(count));
  EXPECT_LE(std::fabs(mean - c.value), 5.0 * stderr_bound)
      << c.spec << " mean " << mean << " vs " << c.value << " over " << count;
  // Nearest rounding, for contrast, is biased by far more than that bound.
  CodecSpec rne = spec;
  rne.rounding = Rounding::kNearestEven;
  const std::vector<float> y = EncodeDecode(rne, x, rows, {});
  EXPECT_GT(std::fabs(y[1] - c.value), 50.0 * stderr_bound);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, StochasticBiasTest,
    ::testing::Values(SrCase{"e4m3/none/sr", 1.1f, 0.0f},     // between 1.0 and 1.125
                      SrCase{"e4m3/none/sr", 0.0013f, 0.0f},  // subnormal range
                      SrCase{"e5m2/none/sr", 3.3f, 0.0f}, SrCase{"bf16/sr", 1.0f + 0x1p-10f, 0.0f},
                      SrCase{"e4m3/block32/sr", 0.3f, 448.0f},  // block scale 1
                      SrCase{"e5m2/mx32/sr", 0.3f, 40000.0f},
                      SrCase{"nvfp4/sr", 1.3f, 6.0f}),  // tensor scale fixed by 6
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Stochastic, ReproducibleFromKeyAndIndependentAcrossKeys) {
  const CodecSpec spec = testing::Spec("e4m3/block128/sr");
  const std::vector<float> x = testing::GradientLike(16, 1000, 9);
  std::vector<uint8_t> a, b, c, d, e;
  EncodeDecode(spec, x, 16, RngKey{1, 2, 3}, &a);
  EncodeDecode(spec, x, 16, RngKey{1, 2, 3}, &b);
  EncodeDecode(spec, x, 16, RngKey{1, 2, 4}, &c);  // another rank
  EncodeDecode(spec, x, 16, RngKey{1, 3, 3}, &d);  // another step
  EncodeDecode(spec, x, 16, RngKey{2, 2, 3}, &e);  // another tensor
  EXPECT_EQ(a, b);
  for (const auto* other : {&c, &d, &e}) {
    size_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff += a[i] != (*other)[i];
    EXPECT_GT(diff, a.size() / 20) << "different keys should round differently";
  }
  // The same key with a thread pool gives the same codes.
  ThreadPool pool(2);
  auto t = EncodedTensor::Create(spec, 16, 1000).value();
  ASSERT_TRUE(Encode(x.data(), t.mutable_view(), RngKey{1, 2, 3}, {.pool = &pool}).ok());
  EXPECT_EQ(t.codes(), a);
}

TEST(Stochastic, RoundsToOneOfTheTwoNeighbours) {
  for (uint32_t random : {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu}) {
    // 1.0625 lies halfway between E4M3 codes 0x38 (1.0) and 0x39 (1.125).
    const uint32_t code = scalar::Quantize(scalar::kE4M3, 1.0625f, true, random);
    EXPECT_TRUE(code == 0x38 || code == 0x39) << random;
    EXPECT_EQ(code, random < 0x80000000u ? 0x39u : 0x38u);
  }
}

}  // namespace
}  // namespace gift::codec
