#include "common/base/tensor_shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gift {

absl::StatusOr<uint64_t> TensorElements(absl::Span<const int64_t> shape) {
  if (shape.empty()) return absl::InvalidArgumentError("shape []: no dimensions");
  if (shape.size() > kMaxTensorDims) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), ": ", shape.size(),
                                                   " dimensions, at most ", kMaxTensorDims));
  }
  uint64_t elements = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 1) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), ": dimension ",
                                                     i, " is ", d, ", must be >= 1"));
    }
    // elements * d <= kMax  <=>  d <= kMax / elements (elements >= 1).
    if (static_cast<uint64_t>(d) > kMaxTensorElements / elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeString(shape), ": more than 2^40 elements (the largest tensor accepted)"));
    }
    elements *= static_cast<uint64_t>(d);
  }
  return elements;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  if (shape.size() > kMaxTensorDims) {
    return absl::StrCat("[", absl::StrJoin(shape.subspan(0, kMaxTensorDims), ", "), ", ... (",
                        shape.size(), " dimensions)]");
  }
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace gift
