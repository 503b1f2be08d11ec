#include "common/dataplane/chunk_shape.h"

#include "gtest/gtest.h"

namespace gift::dataplane {
namespace {

TEST(ChunkShapeTest, WholeRowsOrAPieceOfOneRow) {
  EXPECT_EQ(*ChunkShapeOf(64 * 100, 100, 0, 1000), (ChunkShape{10, 100}));
  EXPECT_EQ(*ChunkShapeOf(64 * 100, 100, 6000, 400), (ChunkShape{4, 100}));
  EXPECT_EQ(*ChunkShapeOf(4 * 1000, 1000, 1000, 512), (ChunkShape{1, 512}));
  EXPECT_EQ(*ChunkShapeOf(4 * 1000, 1000, 1512, 488), (ChunkShape{1, 488}));
  EXPECT_EQ(*ChunkShapeOf(7, 7, 0, 7), (ChunkShape{1, 7}));
}

TEST(ChunkShapeTest, RefusesImpossibleChunks) {
  EXPECT_FALSE(ChunkShapeOf(4 * 1000, 1000, 900, 200).ok());  // crosses a row
  EXPECT_FALSE(ChunkShapeOf(4000, 1000, 3900, 200).ok());     // past the end
  EXPECT_FALSE(ChunkShapeOf(4000, 1000, 0, 0).ok());
  EXPECT_FALSE(ChunkShapeOf(4000, 0, 0, 10).ok());
  EXPECT_FALSE(ChunkShapeOf(4001, 1000, 0, 10).ok());
  EXPECT_FALSE(ChunkShapeOf(UINT64_MAX - 5, 1, UINT64_MAX - 10, 100).ok());
}

}  // namespace
}  // namespace gift::dataplane
