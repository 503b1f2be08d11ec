#include "common/base/tensor_shape.h"

#include <vector>

#include "gtest/gtest.h"

namespace gift {
namespace {

TEST(TensorShapeTest, CountsElements) {
  EXPECT_EQ(TensorElements(std::vector<int64_t>{4, 1024}).value(), 4096u);
  EXPECT_EQ(TensorElements(std::vector<int64_t>{7}).value(), 7u);
  EXPECT_EQ(TensorElements(std::vector<int64_t>{1 << 20, 1 << 20}).value(), kMaxTensorElements);
}

TEST(TensorShapeTest, RejectsEmptyZeroAndNegativeDimensions) {
  EXPECT_EQ(TensorElements({}).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status zero = TensorElements(std::vector<int64_t>{4, 0}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.message(), "shape [4, 0]: dimension 1 is 0, must be >= 1");
  EXPECT_FALSE(TensorElements(std::vector<int64_t>{-3}).ok());
}

TEST(TensorShapeTest, RejectsTooManyElementsWithoutOverflow) {
  EXPECT_FALSE(TensorElements(std::vector<int64_t>{(1 << 20) + 1, 1 << 20}).ok());
  // A product that wraps around 2^64 must not pass as a small number.
  EXPECT_FALSE(TensorElements(std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32, 2}).ok());
  EXPECT_FALSE(TensorElements(std::vector<int64_t>{INT64_MAX}).ok());
}

}  // namespace
}  // namespace gift
