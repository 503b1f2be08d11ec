#include "server/coordinator/shard_map.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <tuple>
#include <vector>

namespace gift::coordinator {
namespace {

constexpr uint64_t kMinChunkBytes = 4 * kChunkAlignElements;

uint64_t EffectiveChunkBytes(uint64_t chunk_bytes) { return std::max(chunk_bytes, kMinChunkBytes); }

}  // namespace

std::vector<gift::v1::Chunk> CutTensor(const gift::v1::TensorInfo& tensor, uint64_t chunk_bytes) {
  std::vector<gift::v1::Chunk> chunks;
  const uint64_t total = tensor.num_elements();
  if (total == 0) return chunks;
  const uint64_t chunk_elements = EffectiveChunkBytes(chunk_bytes) / 4;
  uint64_t cols = tensor.shape().empty() ? 1 : static_cast<uint64_t>(tensor.shape().rbegin()[0]);
  if (cols == 0 || cols > total) cols = total;
  auto add = [&](uint64_t offset, uint64_t n) {
    gift::v1::Chunk& c = chunks.emplace_back();
    c.set_tensor_id(tensor.tensor_id());
    c.set_index(static_cast<uint32_t>(chunks.size() - 1));
    c.set_offset(offset);
    c.set_num_elements(n);
  };
  if (cols <= chunk_elements) {
    const uint64_t step = (chunk_elements / cols) * cols;
    for (uint64_t offset = 0; offset < total; offset += step)
      add(offset, std::min(step, total - offset));
  } else {
    const uint64_t piece = (chunk_elements / kChunkAlignElements) * kChunkAlignElements;
    for (uint64_t row = 0; row < total; row += cols) {
      const uint64_t row_end = std::min(row + cols, total);
      for (uint64_t offset = row; offset < row_end; offset += piece) {
        add(offset, std::min(piece, row_end - offset));
      }
    }
  }
  return chunks;
}

namespace {

using ChunkKey = std::tuple<uint64_t, uint32_t>;

ChunkKey KeyOf(const gift::v1::Chunk& c) { return {c.tensor_id(), c.index()}; }

// Assigns `fresh` chunks greedily on top of `loads` (elements per shard) and
// appends them to `map`, which ends ordered by (tensor id, index).
void AssignChunks(std::vector<gift::v1::Chunk> fresh, const std::vector<uint64_t>& loads,
                  gift::v1::ShardMap* map) {
  std::vector<size_t> order(fresh.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (fresh[a].num_elements() != fresh[b].num_elements()) {
      return fresh[a].num_elements() > fresh[b].num_elements();
    }
    return KeyOf(fresh[a]) < KeyOf(fresh[b]);
  });
  // Min-heap of (load in elements, shard id): the least loaded, then the lowest id.
  using Load = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> heap;
  for (uint32_t s = 0; s < loads.size(); ++s) heap.emplace(loads[s], s);
  for (size_t i : order) {
    auto [load, shard] = heap.top();
    heap.pop();
    fresh[i].set_server_rank(shard);
    heap.emplace(load + fresh[i].num_elements(), shard);
  }
  for (gift::v1::Chunk& c : fresh) *map->add_chunks() = std::move(c);
  std::sort(map->mutable_chunks()->begin(), map->mutable_chunks()->end(),
            [](const gift::v1::Chunk& a, const gift::v1::Chunk& b) { return KeyOf(a) < KeyOf(b); });
}

std::vector<gift::v1::Chunk> CutAll(const std::vector<gift::v1::TensorInfo>& tensors,
                                    uint64_t chunk_bytes) {
  std::vector<gift::v1::Chunk> chunks;
  for (const gift::v1::TensorInfo& t : tensors) {
    std::vector<gift::v1::Chunk> cut = CutTensor(t, chunk_bytes);
    chunks.insert(chunks.end(), std::make_move_iterator(cut.begin()),
                  std::make_move_iterator(cut.end()));
  }
  return chunks;
}

}  // namespace

gift::v1::ShardMap ComputeShardMap(const std::vector<gift::v1::TensorInfo>& tensors,
                                   uint32_t num_servers, uint64_t chunk_bytes, uint64_t epoch) {
  gift::v1::ShardMap map;
  map.set_epoch(epoch);
  map.set_chunk_bytes(EffectiveChunkBytes(chunk_bytes));
  if (num_servers == 0) return map;
  AssignChunks(CutAll(tensors, chunk_bytes), std::vector<uint64_t>(num_servers, 0), &map);
  return map;
}

gift::v1::ShardMap ExtendShardMap(const gift::v1::ShardMap& map,
                                  const std::vector<gift::v1::TensorInfo>& added,
                                  uint32_t num_servers) {
  gift::v1::ShardMap out = map;
  if (num_servers == 0) {
    out.clear_chunks();
    return out;
  }
  std::vector<uint64_t> loads(num_servers, 0);
  for (const gift::v1::Chunk& c : map.chunks()) {
    if (c.server_rank() < num_servers) loads[c.server_rank()] += c.num_elements();
  }
  AssignChunks(CutAll(added, map.chunk_bytes()), loads, &out);
  return out;
}

}  // namespace gift::coordinator
