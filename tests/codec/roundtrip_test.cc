// Encode/decode round trips of every spec stay within the per-element error
// bound, agree across paths, and refuse bad input clearly.
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/scalar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

using ::testing::HasSubstr;

using Shape = std::pair<uint64_t, uint64_t>;

class RoundTripTest : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

TEST_P(RoundTripTest, WithinElementBoundAndSameOnEveryPath) {
  const CodecSpec spec = testing::Spec(std::get<0>(GetParam()));
  const auto [rows, cols] = std::get<1>(GetParam());
  const std::vector<float> x = testing::GradientLike(rows, cols, 42);
  const RngKey key{7, 3, 1};

  auto t = EncodedTensor::Create(spec, rows, cols).value();
  ASSERT_TRUE(Encode(x.data(), t.mutable_view(), key, {.use_simd = false}).ok());
  std::vector<float> y(x.size(), -1.0f);
  ASSERT_TRUE(Decode(t.view(), y.data(), {.use_simd = false}).ok());

  double worst = 0.0;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = r * cols + c;
      const double bound = EncodedErrorBound(t.view(), r, c, x[i]);
      const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << ToString(spec) << " element (" << r << ", " << c << ") x=" << x[i]
                            << " decoded=" << y[i];
      if (x[i] == 0.0f) {
        EXPECT_EQ(y[i], 0.0f);
      }
    }
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));

  // The AVX2 path, and a thread pool, give the same bits.
  ThreadPool pool(3);
  const CodecOptions paths[] = {{.pool = nullptr, .use_simd = true}, {.pool = &pool}};
  for (const CodecOptions& options : paths) {
    auto t2 = EncodedTensor::Create(spec, rows, cols).value();
    ASSERT_TRUE(Encode(x.data(), t2.mutable_view(), key, options).ok());
    EXPECT_EQ(t2.codes(), t.codes());
    EXPECT_EQ(t2.scales(), t.scales());
    std::vector<float> y2(x.size());
    ASSERT_TRUE(Decode(t2.view(), y2.data(), options).ok());
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), 4 * y.size()), 0);
  }

  // Decode-accumulate adds the decoded values, one rounding each.
  std::vector<float> acc(x.size());
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = 0.5f * x[(i * 7) % x.size()];
  std::vector<float> expected(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) expected[i] = acc[i] + y[i];
  ASSERT_TRUE(DecodeAccumulate(t.view(), acc.data(), {.pool = &pool}).ok());
  EXPECT_EQ(std::memcmp(acc.data(), expected.data(), 4 * acc.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, RoundTripTest,
                         ::testing::Combine(::testing::ValuesIn(testing::AllSpecNames()),
                                            ::testing::Values(Shape{1, 1}, Shape{1, 7},
                                                              Shape{7, 33}, Shape{3, 129},
                                                              Shape{64, 1000}, Shape{2, 20000})),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" +
                                              std::to_string(std::get<1>(info.param).first) + "x" +
                                              std::to_string(std::get<1>(info.param).second);
                           for (char& ch : name) {
                             if (ch == '/') ch = '_';
                           }
                           return name;
                         });

TEST(Codec, ScaledValuesUseTheWholeRange) {
  // With per-tensor scaling the largest magnitude lands on the format max.
  std::vector<float> x = {0.001f, -3.5f, 2.0f, 0.25f};
  for (const char* name : {"e4m3/tensor", "e5m2/tensor", "e4m3/block32"}) {
    auto t = EncodedTensor::Create(testing::Spec(name), 1, x.size()).value();
    ASSERT_TRUE(Encode(x.data(), t.mutable_view()).ok());
    const uint32_t max_code = testing::Spec(name).format == Format::kE4M3 ? 0x7E : 0x7B;
    EXPECT_EQ(t.codes()[1], max_code | 0x80) << name;
    std::vector<float> y(x.size());
    ASSERT_TRUE(Decode(t.view(), y.data()).ok());
    EXPECT_FLOAT_EQ(y[1], -3.5f) << name;
  }
}

TEST(Codec, AllZeroTensorDecodesToZeros) {
  std::vector<float> x(300, 0.0f);
  x[5] = -0.0f;
  for (const std::string& name : testing::AllSpecNames()) {
    auto t = EncodedTensor::Create(testing::Spec(name), 3, 100).value();
    ASSERT_TRUE(Encode(x.data(), t.mutable_view()).ok()) << name;
    std::vector<float> y(x.size(), 1.0f);
    ASSERT_TRUE(Decode(t.view(), y.data()).ok());
    for (float v : y) ASSERT_EQ(v, 0.0f) << name;
  }
}

TEST(Codec, RefusesNonFiniteInputNamingTheElement) {
  for (const std::string& name : testing::AllSpecNames()) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = testing::GradientLike(4, 50, 1);
      x[2 * 50 + 17] = bad;
      auto t = EncodedTensor::Create(testing::Spec(name), 4, 50).value();
      const absl::Status s = Encode(x.data(), t.mutable_view());
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_THAT(s.message(), HasSubstr("element 117 (row 2, column 17)")) << name;
      EXPECT_THAT(s.message(), HasSubstr(std::isnan(bad) ? "NaN" : "Inf"));
    }
  }
}

TEST(Codec, RefusesBadArguments) {
  std::vector<float> x(16, 1.0f);
  auto t = EncodedTensor::Create(testing::Spec("e4m3/tensor"), 1, 16).value();
  EXPECT_EQ(Encode(nullptr, t.mutable_view()).code(), absl::StatusCode::kInvalidArgument);
  MutableEncodedView v = t.mutable_view();
  v.scales = nullptr;
  EXPECT_EQ(Encode(x.data(), v).code(), absl::StatusCode::kInvalidArgument);
  v = t.mutable_view();
  v.spec.block_size = 64;
  EXPECT_EQ(Encode(x.data(), v).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(t.view(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Empty tensors are fine and touch nothing.
  MutableEncodedView empty{testing::Spec("e4m3/tensor"), 0, 16, nullptr, nullptr};
  EXPECT_TRUE(Encode(nullptr, empty).ok());
  EXPECT_TRUE(Decode(empty, nullptr).ok());
}

}  // namespace
}  // namespace gift::codec
