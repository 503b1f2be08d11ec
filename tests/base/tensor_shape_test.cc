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

// A shape of 20,000 dimensions of 1 has one element, and is refused with a
// short message (it used to be accepted, and its re-registration with
// another shape failed in gRPC's metadata limit quoting all of it).
TEST(TensorShapeTest, DimensionsAreBoundedAndQuotedShort) {
  const std::vector<int64_t> many(20000, 1);
  const absl::Status s = TensorElements(many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 200u) << s.message();
  EXPECT_NE(s.message().find("20000 dimensions, at most 16"), std::string::npos) << s.message();
  EXPECT_TRUE(TensorElements(std::vector<int64_t>(kMaxTensorDims, 2)).ok());
  EXPECT_FALSE(TensorElements(std::vector<int64_t>(kMaxTensorDims + 1, 1)).ok());
}

}  // namespace

}  // namespace gift
