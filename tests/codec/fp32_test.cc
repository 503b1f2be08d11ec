// The FP32 passthrough format ("fp32"): encode and decode are bit copies on
// every path, payloads carry it, and a reduction over fp32 contributions is
// the sequential FP32 sum times the post-scale, bit for bit (the FP32
// baseline of the service equals a local average).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/base/crc32c.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "common/codec/scalar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

using testing::Bits;
using testing::FromBits;
using ::testing::HasSubstr;

// Finite FP32 values of every kind: random bit patterns over all binades,
// denormals (down to the smallest), +-0, the largest finite values and the
// smallest normals.
std::vector<float> EdgeValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    if (i % 3 == 1) bits &= 0x807FFFFFu;                           // denormals
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= 0xFF7FFFFFu;  // keep finite
    x[i] = FromBits(bits);
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            FromBits(0x00000001u),  // smallest denormal
                            FromBits(0x80000001u),
                            FromBits(0x007FFFFFu),  // largest denormal
                            std::numeric_limits<float>::min(),
                            -std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            1e30f,
                            -3e38f,
                            1.0f,
                            0.1f};
  for (size_t k = 0; k < std::size(specials) && k < n; ++k) x[(k * 7919) % n] = specials[k];
  return x;
}

std::vector<uint8_t> RawBytes(const std::vector<float>& x) {
  std::vector<uint8_t> b(4 * x.size());
  if (!x.empty()) std::memcpy(b.data(), x.data(), b.size());
  return b;
}

TEST(Fp32, ScalarCodesAreTheBitPatterns) {
  for (float v : EdgeValues(4096, 1)) {
    const uint32_t c = scalar::Quantize(scalar::kF32, v, /*stochastic=*/false, 0);
    ASSERT_EQ(c, Bits(v));
    ASSERT_EQ(Bits(scalar::Dequantize(scalar::kF32, c)), Bits(v));
    ASSERT_FALSE(scalar::IsNonFiniteCode(scalar::kF32, c));
  }
  for (uint32_t bad : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u}) {
    EXPECT_TRUE(scalar::IsNonFiniteCode(scalar::kF32, bad)) << std::hex << bad;
  }
}

TEST(Fp32, RoundTripIsABitCopyOnEveryPath) {
  const CodecSpec spec = testing::Spec("fp32");
  ThreadPool pool(3);
  const CodecOptions paths[] = {{.use_simd = false}, {.use_simd = true}, {.pool = &pool}};
  // Shapes beyond one task (1 << 16 elements) and one piece (8192 columns).
  for (const auto& [rows, cols] : std::vector<std::pair<uint64_t, uint64_t>>{
           {1, 1}, {1, 7}, {7, 33}, {3, 129}, {3, 70001}, {40, 4099}}) {
    const std::vector<float> x = EdgeValues(rows * cols, static_cast<uint32_t>(rows + cols));
    for (const CodecOptions& options : paths) {
      auto t = EncodedTensor::Create(spec, rows, cols).value();
      ASSERT_TRUE(Encode(x.data(), t.mutable_view(), RngKey{1, 2, 3}, options).ok());
      ASSERT_EQ(t.codes(), RawBytes(x)) << rows << "x" << cols;
      EXPECT_TRUE(t.scales().empty());
      std::vector<float> y(x.size(), 7.0f);
      ASSERT_TRUE(Decode(t.view(), y.data(), options).ok());
      ASSERT_EQ(RawBytes(y), RawBytes(x)) << rows << "x" << cols;
      // Accumulating adds the exact value: one FP32 addition per element.
      std::vector<float> acc = EdgeValues(x.size(), 99);
      for (float& a : acc) a = std::ldexp(a, -2);
      std::vector<float> want(acc.size());
      for (size_t i = 0; i < acc.size(); ++i) want[i] = acc[i] + x[i];
      ASSERT_TRUE(DecodeAccumulate(t.view(), acc.data(), options).ok());
      ASSERT_EQ(RawBytes(acc), RawBytes(want)) << rows << "x" << cols;
      EXPECT_EQ(EncodedErrorBound(t.view(), 0, 0, x[0]), 0.0);
    }
  }
}

TEST(Fp32, RefusesNonFiniteInputLikeEveryFormat) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = EdgeValues(4 * 50, 5);
    x[2 * 50 + 17] = bad;
    auto t = EncodedTensor::Create(testing::Spec("fp32"), 4, 50).value();
    const absl::Status s = Encode(x.data(), t.mutable_view());
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("element 117 (row 2, column 17)"));
  }
}

TEST(Fp32, PayloadCarriesTheBitsAndRefusesNonFiniteCodes) {
  const std::vector<uint64_t> shape = {2, 3, 41};
  const std::vector<float> x = EdgeValues(2 * 3 * 41, 8);
  auto t = EncodedTensor::Create(testing::Spec("fp32"), 6, 41).value();
  ASSERT_TRUE(Encode(x.data(), t.mutable_view()).ok());
  std::vector<uint8_t> bytes = SerializePayload(t.view(), shape).value();
  // Header, no scales, 4 bytes per element.
  EXPECT_EQ(bytes.size(), kPayloadFixedHeaderBytes + 8 * shape.size() + 4 * x.size());
  EXPECT_EQ(bytes[8], 5);  // element format on the wire
  EXPECT_EQ(bytes[9], 0);  // Scaling::kNone
  absl::StatusOr<ParsedPayload> parsed = ParsePayload(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->shape, shape);
  EXPECT_EQ(parsed->view.spec, testing::Spec("fp32"));
  std::vector<float> y(x.size());
  ASSERT_TRUE(Decode(parsed->view, y.data()).ok());
  EXPECT_EQ(RawBytes(y), RawBytes(x));

  auto reseal = [](std::vector<uint8_t>& p) {
    std::memset(p.data() + 40, 0, 4);
    const uint32_t crc = crc32c::Value(p.data(), p.size());
    std::memcpy(p.data() + 40, &crc, 4);
  };
  const size_t codes_at = kPayloadFixedHeaderBytes + 8 * shape.size();
  for (uint32_t bad : {0x7F800000u, 0xFFC00001u}) {
    std::vector<uint8_t> p = bytes;
    std::memcpy(p.data() + codes_at + 4 * 37, &bad, 4);
    reseal(p);
    const absl::Status s = ParsePayload(p).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("code 37 is NaN or Inf"));
  }
  // A scaling in the header is refused for fp32.
  std::vector<uint8_t> p = bytes;
  p[9] = static_cast<uint8_t>(Scaling::kPerTensor);
  reseal(p);
  EXPECT_THAT(ParsePayload(p).status().message(), HasSubstr("takes no scaling"));
}

TEST(Fp32, ReduceIsTheSequentialSumTimesPostScale) {
  const uint64_t rows = 13, cols = 8201;  // more than one piece per row
  ThreadPool pool(2);
  for (int p : {1, 2, 3, 4, 7}) {
    std::vector<std::vector<float>> g;
    std::vector<EncodedTensor> tensors;
    std::vector<EncodedView> views;
    for (int k = 0; k < p; ++k) {
      g.push_back(testing::GradientLike(rows, cols, 500 + k));
      tensors.push_back(EncodedTensor::Create(testing::Spec("fp32"), rows, cols).value());
      ASSERT_TRUE(Encode(g.back().data(), tensors.back().mutable_view()).ok());
    }
    for (const EncodedTensor& t : tensors) views.push_back(t.view());
    const float post_scale = 1.0f / static_cast<float>(p);
    // The local average: ((g0 + g1) + g2) + ... in FP32, then times 1/P.
    std::vector<float> want(rows * cols);
    for (size_t i = 0; i < want.size(); ++i) {
      float s = g[0][i];
      for (int k = 1; k < p; ++k) s = s + g[k][i];
      want[i] = s * post_scale;
    }
    const CodecOptions paths[] = {{.use_simd = false}, {.use_simd = true}, {.pool = &pool}};
    for (const CodecOptions& options : paths) {
      std::vector<float> sum(rows * cols, -1.0f);
      auto out = EncodedTensor::Create(testing::Spec("fp32"), rows, cols).value();
      ASSERT_TRUE(
          ReduceEncoded(views, sum.data(), post_scale, out.mutable_view(), {}, options).ok());
      ASSERT_EQ(RawBytes(sum), RawBytes(want)) << "P=" << p;
      // Re-encoding the result in fp32 is a copy of it.
      ASSERT_EQ(out.codes(), RawBytes(want)) << "P=" << p;
    }
  }
}

TEST(Fp32, ReduceMixesWithOtherFormatsAndReportsOverflow) {
  // An fp32 contribution next to a bf16 one sums their decoded values.
  const std::vector<float> a = testing::GradientLike(3, 40, 1), b = testing::GradientLike(3, 40, 2);
  auto ta = EncodedTensor::Create(testing::Spec("fp32"), 3, 40).value();
  auto tb = EncodedTensor::Create(testing::Spec("bf16"), 3, 40).value();
  ASSERT_TRUE(Encode(a.data(), ta.mutable_view()).ok());
  ASSERT_TRUE(Encode(b.data(), tb.mutable_view()).ok());
  std::vector<float> db(b.size());
  ASSERT_TRUE(Decode(tb.view(), db.data()).ok());
  const std::vector<EncodedView> views = {ta.view(), tb.view()};
  std::vector<float> sum(a.size());
  ASSERT_TRUE(ReduceEncoded(views, sum.data(), 1.0f, MutableEncodedView{}).ok());
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(Bits(sum[i]), Bits(a[i] + db[i])) << i;

  // A sum that overflows FP32 cannot be encoded in fp32 either.
  const std::vector<float> big(64, 3e38f);
  std::vector<EncodedTensor> t;
  for (int k = 0; k < 2; ++k) {
    t.push_back(EncodedTensor::Create(testing::Spec("fp32"), 2, 32).value());
    ASSERT_TRUE(Encode(big.data(), t.back().mutable_view()).ok());
  }
  const std::vector<EncodedView> big_views = {t[0].view(), t[1].view()};
  std::vector<float> big_sum(64);
  auto out = EncodedTensor::Create(testing::Spec("fp32"), 2, 32).value();
  const absl::Status s = ReduceEncoded(big_views, big_sum.data(), 1.0f, out.mutable_view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("summed element 0 (row 0, column 0) is +Inf"));
  // The post-scale applies to the sum (as in a local average), so halving
  // does not bring it back.
  EXPECT_FALSE(ReduceEncoded(big_views, big_sum.data(), 0.5f, out.mutable_view()).ok());
}

}  // namespace
}  // namespace gift::codec
