// The reduction primitive: decode N contributions, sum in FP32 in input
// order, re-encode.
#include "common/codec/reduce.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

struct Contributions {
  std::vector<EncodedTensor> tensors;
  std::vector<EncodedView> views;
  std::vector<std::vector<float>> decoded;
};

Contributions MakeContributions(const std::vector<std::string>& specs, uint64_t rows,
                                uint64_t cols) {
  Contributions c;
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::vector<float> x = testing::GradientLike(rows, cols, 100 + k);
    c.tensors.push_back(EncodedTensor::Create(testing::Spec(specs[k]), rows, cols).value());
    EXPECT_TRUE(Encode(x.data(), c.tensors.back().mutable_view(), RngKey{1, 1, uint32_t(k)}).ok());
    std::vector<float> y(x.size());
    EXPECT_TRUE(Decode(c.tensors.back().view(), y.data()).ok());
    c.decoded.push_back(std::move(y));
  }
  for (const auto& t : c.tensors) c.views.push_back(t.view());
  return c;
}

TEST(Reduce, MatchesDoublePrecisionReferenceAndSequentialFp32) {
  const uint64_t rows = 37, cols = 300;
  const std::vector<std::string> specs = {"e4m3/tensor", "e4m3/block128/sr", "e5m2/mx32", "nvfp4",
                                          "bf16",        "e4m3/block32"};
  for (size_t n = 1; n <= specs.size(); ++n) {
    Contributions c =
        MakeContributions(std::vector<std::string>(specs.begin(), specs.begin() + n), rows, cols);
    std::vector<float> sum(rows * cols);
    ThreadPool pool(2);
    ASSERT_TRUE(
        ReduceEncoded(c.views, sum.data(), 1.0f, MutableEncodedView{}, {}, {.pool = &pool}).ok());
    for (uint64_t i = 0; i < sum.size(); ++i) {
      float seq = c.decoded[0][i];
      double exact = 0.0, magnitude = 0.0;
      for (size_t k = 0; k < n; ++k) {
        if (k > 0) seq = seq + c.decoded[k][i];
        exact += c.decoded[k][i];
        magnitude += std::fabs(c.decoded[k][i]);
      }
      // Bit-identical to summing the decoded inputs in order in FP32 ...
      ASSERT_EQ(testing::Bits(sum[i]), testing::Bits(seq)) << "n=" << n << " i=" << i;
      // ... and within FP32's accumulation bound of the exact sum.
      ASSERT_LE(std::fabs(sum[i] - exact), (n - 1) * std::ldexp(magnitude, -24))
          << "n=" << n << " i=" << i;
    }
  }
}

TEST(Reduce, ReencodesTheSumAndAppliesPostScale) {
  const uint64_t rows = 9, cols = 515;
  Contributions c = MakeContributions(
      {"e4m3/block128", "e4m3/block128", "e4m3/block128", "e4m3/block128"}, rows, cols);
  std::vector<float> sum(rows * cols);
  auto out = EncodedTensor::Create(testing::Spec("e5m2/block32/sr"), rows, cols).value();
  const RngKey key{4, 5, 6};
  ASSERT_TRUE(ReduceEncoded(c.views, sum.data(), 0.25f, out.mutable_view(), key).ok());
  for (uint64_t i = 0; i < sum.size(); ++i) {
    const float s = ((c.decoded[0][i] + c.decoded[1][i]) + c.decoded[2][i]) + c.decoded[3][i];
    ASSERT_EQ(testing::Bits(sum[i]), testing::Bits(s * 0.25f)) << i;
  }
  auto expected = EncodedTensor::Create(testing::Spec("e5m2/block32/sr"), rows, cols).value();
  ASSERT_TRUE(Encode(sum.data(), expected.mutable_view(), key).ok());
  EXPECT_EQ(out.codes(), expected.codes());
  EXPECT_EQ(out.scales(), expected.scales());
}

TEST(Reduce, ReportsASumThatOverflows) {
  // Two bf16 contributions near FP32's max overflow to Inf when added.
  const std::vector<float> big(64, 3e38f);
  std::vector<EncodedTensor> t;
  for (int k = 0; k < 2; ++k) {
    t.push_back(EncodedTensor::Create(testing::Spec("bf16"), 2, 32).value());
    ASSERT_TRUE(Encode(big.data(), t.back().mutable_view()).ok());
  }
  const std::vector<EncodedView> views = {t[0].view(), t[1].view()};
  std::vector<float> sum(64);
  for (const char* spec : {"e4m3/tensor", "e4m3/block32", "nvfp4"}) {
    auto out = EncodedTensor::Create(testing::Spec(spec), 2, 32).value();
    const absl::Status s = ReduceEncoded(views, sum.data(), 1.0f, out.mutable_view());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("summed element 0 (row 0, column 0) is +Inf"));
  }
  // Without an output to encode, the (infinite) sum is returned as it is.
  EXPECT_TRUE(ReduceEncoded(views, sum.data(), 1.0f, MutableEncodedView{}).ok());
  EXPECT_TRUE(std::isinf(sum[0]));
}

TEST(Reduce, RefusesMismatchedOrMissingInputs) {
  Contributions a = MakeContributions({"e4m3/tensor"}, 4, 10);
  Contributions b = MakeContributions({"e4m3/tensor"}, 5, 8);
  std::vector<float> sum(40);
  EXPECT_EQ(ReduceEncoded({}, sum.data(), 1.0f, {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<EncodedView> mixed = {a.views[0], b.views[0]};
  const absl::Status s = ReduceEncoded(mixed, sum.data(), 1.0f, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("input 1 is 5 x 8"));
  EXPECT_EQ(ReduceEncoded(a.views, nullptr, 1.0f, {}).code(), absl::StatusCode::kInvalidArgument);
  auto out = EncodedTensor::Create(testing::Spec("e4m3/tensor"), 2, 20).value();
  EXPECT_EQ(ReduceEncoded(a.views, sum.data(), 1.0f, out.mutable_view()).code(),
            absl::StatusCode::kInvalidArgument);
  EncodedView broken = a.views[0];
  broken.codes = nullptr;
  EXPECT_EQ(ReduceEncoded({&broken, 1}, sum.data(), 1.0f, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::codec
