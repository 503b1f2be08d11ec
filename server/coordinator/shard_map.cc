#include "server/coordinator/shard_map.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace gift::coordinator {
namespace {

constexpr uint64_t kMinChunkBytes = 4 * kChunkAlignElements;

uint64_t EffectiveChunkBytes(uint64_t chunk_bytes) { return std::max(chunk_bytes, kMinChunkBytes); }

// The row length CutTensor cuts `tensor` by (its last dimension, capped to
// the tensor).
uint64_t ColsOf(const gift::v1::TensorInfo& tensor) {
  const uint64_t total = tensor.num_elements();
  uint64_t cols = tensor.shape().empty() ? 1 : static_cast<uint64_t>(tensor.shape().rbegin()[0]);
  if (cols == 0 || cols > total) cols = total;
  return cols;
}

}  // namespace

std::vector<gift::v1::Chunk> CutTensor(const gift::v1::TensorInfo& tensor, uint64_t chunk_bytes) {
  std::vector<gift::v1::Chunk> chunks;
  const uint64_t total = tensor.num_elements();
  if (total == 0) return chunks;
  const uint64_t chunk_elements = EffectiveChunkBytes(chunk_bytes) / 4;
  const uint64_t cols = ColsOf(tensor);
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

// The granularity a chunk may be split at: a row when it holds whole rows,
// else kChunkAlignElements (a piece of a long row starts aligned from its
// row's start, so an aligned split keeps both parts aligned).
uint64_t SplitUnit(const gift::v1::Chunk& c, uint64_t cols) {
  return c.num_elements() >= cols && c.offset() % cols == 0 && c.num_elements() % cols == 0
             ? cols
             : kChunkAlignElements;
}

// Evens out what greedy assignment leaves (up to one chunk between the most-
// and least-loaded shard): moves the tail of a chunk of the most-loaded shard
// to the least-loaded one, splitting it at a SplitUnit boundary, until no
// split narrows the gap. Chunks are split, never merged or moved whole;
// their indices are renumbered in offset order by the caller.
void BalanceBySplitting(std::vector<gift::v1::Chunk>& fresh, std::vector<uint64_t>& loads,
                        const absl::flat_hash_map<uint64_t, uint64_t>& cols) {
  const size_t max_splits = 4 * loads.size() + 4;  // each split halves a gap: few are needed
  for (size_t split = 0; split < max_splits; ++split) {
    const auto [lo_it, hi_it] = std::minmax_element(loads.begin(), loads.end());
    const auto lo = static_cast<uint32_t>(lo_it - loads.begin());
    const auto hi = static_cast<uint32_t>(hi_it - loads.begin());
    const uint64_t want = (loads[hi] - loads[lo]) / 2;  // moving this evens the pair
    // The chunk of `hi` that can give the most, up to `want` (ties: the
    // first in key order, for determinism).
    size_t best = fresh.size();
    uint64_t best_moved = 0;
    for (size_t i = 0; i < fresh.size(); ++i) {
      const gift::v1::Chunk& c = fresh[i];
      if (c.server_rank() != hi) continue;
      const uint64_t unit = SplitUnit(c, cols.at(c.tensor_id()));
      const uint64_t moved = std::min(want, c.num_elements() - 1) / unit * unit;
      if (moved > best_moved ||
          (moved == best_moved && moved > 0 && KeyOf(c) < KeyOf(fresh[best]))) {
        best = i;
        best_moved = moved;
      }
    }
    if (best_moved == 0) return;
    gift::v1::Chunk tail = fresh[best];
    const uint64_t keep = fresh[best].num_elements() - best_moved;
    fresh[best].set_num_elements(keep);
    tail.set_offset(tail.offset() + keep);
    tail.set_num_elements(best_moved);
    tail.set_server_rank(lo);
    fresh.push_back(std::move(tail));
    loads[hi] -= best_moved;
    loads[lo] += best_moved;
  }
}

// Renumbers the chunks of each tensor of `fresh` 0, 1, ... in offset order.
void IndexByOffset(std::vector<gift::v1::Chunk>& fresh) {
  std::sort(fresh.begin(), fresh.end(), [](const gift::v1::Chunk& a, const gift::v1::Chunk& b) {
    return std::make_pair(a.tensor_id(), a.offset()) < std::make_pair(b.tensor_id(), b.offset());
  });
  for (size_t i = 0; i < fresh.size(); ++i) {
    const bool first = i == 0 || fresh[i - 1].tensor_id() != fresh[i].tensor_id();
    fresh[i].set_index(first ? 0 : fresh[i - 1].index() + 1);
  }
}

// Assigns `fresh` chunks (of the tensors in `cols`: id -> row length)
// greedily on top of `loads` (elements per shard), evens the loads out by
// splitting, and appends them to `map`, which ends ordered by (tensor id,
// index).
void AssignChunks(std::vector<gift::v1::Chunk> fresh, std::vector<uint64_t> loads,
                  const absl::flat_hash_map<uint64_t, uint64_t>& cols, gift::v1::ShardMap* map) {
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
    loads[shard] += fresh[i].num_elements();
  }
  BalanceBySplitting(fresh, loads, cols);
  IndexByOffset(fresh);
  for (gift::v1::Chunk& c : fresh) *map->add_chunks() = std::move(c);
  std::sort(map->mutable_chunks()->begin(), map->mutable_chunks()->end(),
            [](const gift::v1::Chunk& a, const gift::v1::Chunk& b) { return KeyOf(a) < KeyOf(b); });
}

std::vector<gift::v1::Chunk> CutAll(const std::vector<gift::v1::TensorInfo>& tensors,
                                    uint64_t chunk_bytes,
                                    absl::flat_hash_map<uint64_t, uint64_t>& cols) {
  std::vector<gift::v1::Chunk> chunks;
  for (const gift::v1::TensorInfo& t : tensors) {
    if (t.num_elements() > 0) cols[t.tensor_id()] = ColsOf(t);
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
  absl::flat_hash_map<uint64_t, uint64_t> cols;
  std::vector<gift::v1::Chunk> chunks = CutAll(tensors, chunk_bytes, cols);
  AssignChunks(std::move(chunks), std::vector<uint64_t>(num_servers, 0), cols, &map);
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
  absl::flat_hash_map<uint64_t, uint64_t> cols;
  std::vector<gift::v1::Chunk> chunks = CutAll(added, map.chunk_bytes(), cols);
  AssignChunks(std::move(chunks), std::move(loads), cols, &out);
  return out;
}

}  // namespace gift::coordinator
