// The encoded shape of a chunk of a tensor (shard map, cluster.proto Chunk):
// a chunk never crosses a row, so it is either whole rows of the tensor or a
// piece of one row.
//
// Thread safety: a pure function.
#ifndef GIFT_COMMON_DATAPLANE_CHUNK_SHAPE_H_
#define GIFT_COMMON_DATAPLANE_CHUNK_SHAPE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace gift::dataplane {

struct ChunkShape {
  uint64_t rows = 0;
  uint64_t cols = 0;
  bool operator==(const ChunkShape&) const = default;
};

// The chunk [offset, offset + num_elements) of a row-major tensor of
// `total_elements` elements in rows of `cols`: (num_elements / cols) x cols
// when it covers whole rows, else 1 x num_elements when it lies within one
// row. InvalidArgument otherwise (it crosses a row boundary, is empty, or
// runs past the tensor).
absl::StatusOr<ChunkShape> ChunkShapeOf(uint64_t total_elements, uint64_t cols, uint64_t offset,
                                        uint64_t num_elements);

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_CHUNK_SHAPE_H_
