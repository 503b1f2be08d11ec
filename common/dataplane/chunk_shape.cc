#include "common/dataplane/chunk_shape.h"

#include "absl/strings/str_cat.h"

namespace gift::dataplane {

absl::StatusOr<ChunkShape> ChunkShapeOf(uint64_t total_elements, uint64_t cols, uint64_t offset,
                                        uint64_t num_elements) {
  if (cols == 0 || total_elements % cols != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of ", total_elements, " elements has no rows of ", cols));
  }
  if (num_elements == 0 || offset >= total_elements || num_elements > total_elements - offset) {
    return absl::InvalidArgumentError(absl::StrCat("chunk [", offset, ", +", num_elements,
                                                   ") is empty or outside the tensor of ",
                                                   total_elements, " elements"));
  }
  if (offset % cols == 0 && num_elements % cols == 0) {
    return ChunkShape{num_elements / cols, cols};
  }
  if (offset / cols == (offset + num_elements - 1) / cols) return ChunkShape{1, num_elements};
  return absl::InvalidArgumentError(absl::StrCat("chunk [", offset, ", +", num_elements,
                                                 ") crosses a row boundary (rows of ", cols, ")"));
}

}  // namespace gift::dataplane
