// ReduceEncodedBlocked: the cache-blocked reduction reproduces ReduceEncoded
// bit for bit, for every output spec (stochastic rounding, block, tensor and
// NVFP4 scaling, the FP32 passthrough included).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/codec/pieces.h"
#include "common/codec/reduce.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

struct Inputs {
  std::vector<EncodedTensor> tensors;
  std::vector<EncodedView> views;
};

Inputs MakeInputs(const std::vector<std::string>& specs, uint64_t rows, uint64_t cols) {
  Inputs in;
  for (size_t k = 0; k < specs.size(); ++k) {
    const std::vector<float> x = testing::GradientLike(rows, cols, 7 + k);
    in.tensors.push_back(EncodedTensor::Create(testing::Spec(specs[k]), rows, cols).value());
    EXPECT_TRUE(Encode(x.data(), in.tensors.back().mutable_view(), RngKey{3, 9, uint32_t(k)}).ok());
  }
  for (const auto& t : in.tensors) in.views.push_back(t.view());
  return in;
}

// Reference (ReduceEncoded) and blocked results into fresh tensors; expects
// equal codes and scales.
void ExpectSameResult(const Inputs& in, const std::string& out_spec, float post_scale,
                      const RngKey& key, ThreadPool* pool) {
  const uint64_t rows = in.views[0].rows, cols = in.views[0].cols;
  auto want = EncodedTensor::Create(testing::Spec(out_spec), rows, cols).value();
  std::vector<float> sum(rows * cols);
  ASSERT_TRUE(
      ReduceEncoded(in.views, sum.data(), post_scale, want.mutable_view(), key, {.pool = pool})
          .ok());
  auto got = EncodedTensor::Create(testing::Spec(out_spec), rows, cols).value();
  std::vector<float> scratch(ReduceScratchFloats(cols));
  ASSERT_TRUE(
      ReduceEncodedBlocked(in.views, post_scale, got.mutable_view(), absl::MakeSpan(scratch), key)
          .ok());
  EXPECT_EQ(got.codes(), want.codes()) << out_spec << " " << rows << "x" << cols;
  EXPECT_EQ(got.scales(), want.scales()) << out_spec << " " << rows << "x" << cols;
}

TEST(ReduceBlocked, MatchesReduceEncodedForEveryOutputSpec) {
  ThreadPool pool(2);
  // One piece per row, several pieces per row (cols > kPieceCols), a ragged
  // row that is not a multiple of any block size.
  const std::vector<std::pair<uint64_t, uint64_t>> shapes = {
      {16, 1024}, {3, internal::kPieceCols + 300}, {7, 515}};
  const Inputs fp8_block =
      MakeInputs({"e4m3/block128", "e4m3/block128", "e4m3/block128", "e4m3/block128"}, 16, 1024);
  for (const std::string& spec : testing::AllSpecNames()) {
    for (const auto& [rows, cols] : shapes) {
      const Inputs mixed =
          MakeInputs({"e4m3/block128/sr", "e5m2/tensor", "nvfp4", "bf16"}, rows, cols);
      ExpectSameResult(mixed, spec, 0.25f, RngKey{11, 12, 0xFFFFFFFFu}, &pool);
      ExpectSameResult(mixed, spec, 1.0f, RngKey{11, 13, 5}, nullptr);
    }
    ExpectSameResult(fp8_block, spec, 0.25f, RngKey{1, 2, 3}, nullptr);
  }
}

TEST(ReduceBlocked, ExactFp32SumIsTheSequentialAverage) {
  for (const auto& [rows, cols] :
       std::vector<std::pair<uint64_t, uint64_t>>{{8, 1024}, {2, internal::kPieceCols + 5}}) {
    const Inputs in = MakeInputs({"fp32", "fp32", "fp32", "fp32"}, rows, cols);
    ExpectSameResult(in, "fp32", 0.25f, {}, nullptr);
  }
}

TEST(ReduceBlocked, RefusesNonFiniteSumsAndBadBuffers) {
  const uint64_t rows = 2, cols = 64;
  std::vector<float> big(rows * cols, std::numeric_limits<float>::max());
  auto a = EncodedTensor::Create(testing::Spec("fp32"), rows, cols).value();
  ASSERT_TRUE(Encode(big.data(), a.mutable_view()).ok());
  const std::vector<EncodedView> views = {a.view(), a.view()};
  std::vector<float> scratch(ReduceScratchFloats(cols));
  for (const char* spec : {"e4m3/block32", "e4m3/tensor", "nvfp4", "fp32"}) {
    auto out = EncodedTensor::Create(testing::Spec(spec), rows, cols).value();
    const absl::Status s =
        ReduceEncodedBlocked(views, 1.0f, out.mutable_view(), absl::MakeSpan(scratch));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("summed element 0 (row 0, column 0) is +Inf"))
        << spec;
  }
  auto out = EncodedTensor::Create(testing::Spec("e4m3/block32"), rows, cols).value();
  std::vector<float> small(cols - 1);
  EXPECT_EQ(ReduceEncodedBlocked(views, 1.0f, out.mutable_view(), absl::MakeSpan(small)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReduceEncodedBlocked(views, 1.0f, MutableEncodedView{}, absl::MakeSpan(scratch)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::codec
