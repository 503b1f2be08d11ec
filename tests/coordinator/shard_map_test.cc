#include "server/coordinator/shard_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gift::coordinator {
namespace {

gift::v1::TensorInfo Tensor(uint64_t id, std::vector<int64_t> shape) {
  gift::v1::TensorInfo t;
  t.set_tensor_id(id);
  uint64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_num_elements(n);
  return t;
}

// Every element of every tensor is in exactly one chunk, in order.
void ExpectCovers(const gift::v1::ShardMap& map, const std::vector<gift::v1::TensorInfo>& tensors) {
  for (const gift::v1::TensorInfo& t : tensors) {
    uint64_t next = 0;
    uint32_t index = 0;
    for (const gift::v1::Chunk& c : map.chunks()) {
      if (c.tensor_id() != t.tensor_id()) continue;
      EXPECT_EQ(c.index(), index++);
      EXPECT_EQ(c.offset(), next);
      EXPECT_GT(c.num_elements(), 0u);
      next += c.num_elements();
    }
    EXPECT_EQ(next, t.num_elements()) << "tensor " << t.tensor_id();
  }
}

TEST(CutTensorTest, ChunksHoldWholeRowsWhenARowFits) {
  // 1000 rows of 300 floats (1200 bytes); 4096-byte chunks hold 3 rows.
  std::vector<gift::v1::Chunk> chunks = CutTensor(Tensor(1, {1000, 300}), 4096);
  ASSERT_EQ(chunks.size(), 334u);
  for (const gift::v1::Chunk& c : chunks) {
    EXPECT_EQ(c.offset() % 300, 0u);
    EXPECT_EQ(c.num_elements() % 300, 0u);
  }
  EXPECT_EQ(chunks.back().num_elements(), 300u);
}

TEST(CutTensorTest, LongRowsAreCutInAlignedPiecesThatNeverCrossARow) {
  // Rows of 5000 floats; 4096-byte chunks = 1024 elements, a multiple of 128.
  std::vector<gift::v1::Chunk> chunks = CutTensor(Tensor(1, {3, 5000}), 4096);
  ASSERT_EQ(chunks.size(), 15u);  // 4 full pieces + one of 904 per row
  for (const gift::v1::Chunk& c : chunks) {
    const uint64_t row = c.offset() / 5000;
    EXPECT_LE(c.offset() + c.num_elements(), (row + 1) * 5000);
    EXPECT_EQ((c.offset() % 5000) % kChunkAlignElements, 0u);
  }
}

TEST(ShardMapTest, NoServersMeansNoChunks) {
  gift::v1::ShardMap map = ComputeShardMap({Tensor(1, {64, 64})}, 0, 4096, 7);
  EXPECT_EQ(map.epoch(), 7u);
  EXPECT_EQ(map.chunk_bytes(), 4096u);
  EXPECT_EQ(map.chunks_size(), 0);
}

TEST(ShardMapTest, BalancedWithinOneChunkAndDeterministic) {
  std::vector<gift::v1::TensorInfo> tensors;
  for (uint64_t i = 1; i <= 40; ++i) {
    tensors.push_back(
        Tensor(i, {static_cast<int64_t>(17 * i + 5), static_cast<int64_t>(3 * i + 64)}));
  }
  tensors.push_back(Tensor(41, {100000}));
  for (uint32_t servers : {1u, 3u, 7u}) {
    gift::v1::ShardMap map = ComputeShardMap(tensors, servers, 8192, 1);
    ExpectCovers(map, tensors);
    std::vector<uint64_t> load(servers, 0);
    uint64_t largest = 0;
    for (const gift::v1::Chunk& c : map.chunks()) {
      ASSERT_LT(c.server_rank(), servers);
      load[c.server_rank()] += c.num_elements();
      largest = std::max<uint64_t>(largest, c.num_elements());
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, largest) << servers << " servers";
    EXPECT_EQ(map.SerializeAsString(),
              ComputeShardMap(tensors, servers, 8192, 1).SerializeAsString());
  }
}

std::vector<uint64_t> Loads(const gift::v1::ShardMap& map, uint32_t servers) {
  std::vector<uint64_t> load(servers, 0);
  for (const gift::v1::Chunk& c : map.chunks()) load.at(c.server_rank()) += c.num_elements();
  return load;
}

// A Llama-style model with few chunks per server (gift-bench cluster's
// d_model 512 x 2 layers at 1 MiB chunks over 4 co-located servers), where
// greedy assignment alone leaves 13 % between the most- and least-loaded
// server: split chunks even it out to within a row.
TEST(ShardMapTest, SplitsChunksSoEveryServerCarriesItsShare) {
  std::vector<gift::v1::TensorInfo> tensors;
  uint64_t id = 1;
  for (int layer = 0; layer < 2; ++layer) {
    for (int i = 0; i < 4; ++i) tensors.push_back(Tensor(id++, {512, 512}));
    tensors.push_back(Tensor(id++, {1408, 512}));
    tensors.push_back(Tensor(id++, {1408, 512}));
    tensors.push_back(Tensor(id++, {512, 1408}));
    tensors.push_back(Tensor(id++, {512}));
    tensors.push_back(Tensor(id++, {512}));
  }
  tensors.push_back(Tensor(id++, {3, 70000}));  // long rows: aligned pieces
  for (uint32_t servers : {2u, 3u, 4u}) {
    const uint64_t chunk_bytes = 1 << 20;
    gift::v1::ShardMap map = ComputeShardMap(tensors, servers, chunk_bytes, 1);
    ExpectCovers(map, tensors);
    const std::vector<uint64_t> load = Loads(map, servers);
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 1408u) << servers << " servers";  // the longest row
    for (const gift::v1::Chunk& c : map.chunks()) {
      EXPECT_LE(c.num_elements() * 4, chunk_bytes);
      const gift::v1::TensorInfo& t = tensors[c.tensor_id() - 1];
      const uint64_t cols = t.shape().rbegin()[0];
      // Whole rows, or a piece of one row starting at an aligned offset.
      const bool whole_rows = c.offset() % cols == 0 && c.num_elements() % cols == 0;
      const bool in_row = c.offset() / cols == (c.offset() + c.num_elements() - 1) / cols &&
                          (c.offset() % cols) % kChunkAlignElements == 0;
      EXPECT_TRUE(whole_rows || in_row) << "tensor " << c.tensor_id() << " chunk " << c.index();
    }
    EXPECT_EQ(map.SerializeAsString(),
              ComputeShardMap(tensors, servers, chunk_bytes, 1).SerializeAsString());
  }
}

TEST(ShardMapTest, ExtendKeepsExistingAssignments) {
  std::vector<gift::v1::TensorInfo> first = {Tensor(1, {256, 256}), Tensor(2, {64, 64})};
  gift::v1::ShardMap map = ComputeShardMap(first, 2, 16384, 3);
  gift::v1::ShardMap extended = ExtendShardMap(map, {Tensor(3, {128, 128})}, 2);
  EXPECT_EQ(extended.epoch(), 3u);
  ExpectCovers(extended, {Tensor(1, {256, 256}), Tensor(2, {64, 64}), Tensor(3, {128, 128})});
  for (const gift::v1::Chunk& old : map.chunks()) {
    bool found = false;
    for (const gift::v1::Chunk& c : extended.chunks()) {
      if (c.tensor_id() == old.tensor_id() && c.index() == old.index()) {
        EXPECT_EQ(c.server_rank(), old.server_rank());
        found = true;
      }
    }
    EXPECT_TRUE(found);
  }
}

}  // namespace
}  // namespace gift::coordinator
