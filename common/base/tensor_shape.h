// The one definition of the tensor shapes GIFT-PS accepts, used wherever a
// shape arrives from outside (a worker's RegisterBuffers, the coordinator's
// RegisterTensors): one to kMaxTensorDims dimensions (a model's tensors
// have at most a handful; the bound keeps shapes, and the error texts that
// quote them, small), every dimension >= 1, at most kMaxTensorElements
// elements in all (2^40: 4 TiB of FP32, far beyond any one gradient, and
// small enough that byte counts of several such tensors cannot overflow 64
// bits).
//
// Thread safety: pure functions.
#ifndef GIFT_COMMON_BASE_TENSOR_SHAPE_H_
#define GIFT_COMMON_BASE_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gift {

inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 40;
inline constexpr size_t kMaxTensorDims = 16;

// The number of elements of `shape`, or INVALID_ARGUMENT saying what is wrong
// ("shape [4, 0]: dimension 1 is 0, must be >= 1", "... has 2^41 elements,
// more than 2^40"). The product is checked without overflow.
absl::StatusOr<uint64_t> TensorElements(absl::Span<const int64_t> shape);

// "[4, 1024]"; past kMaxTensorDims dimensions, the first ones and the count
// ("[1, 1, ..., 1, ... (20000 dimensions)]").
std::string ShapeString(absl::Span<const int64_t> shape);

}  // namespace gift

#endif  // GIFT_COMMON_BASE_TENSOR_SHAPE_H_
