// The shard map: which aggregator server reduces which slice of which tensor.
//
// Each tensor (row-major; rows = product of all dimensions but the last,
// cols = the last dimension, as in common/codec/codec_spec.h) is cut into
// chunks of about `chunk_bytes` of FP32:
//   - a row that fits in a chunk is never split: a chunk holds
//     floor(chunk_elements / cols) whole rows (the last chunk fewer), so
//     codec scaling blocks, which never cross a row, never straddle chunks;
//   - a row larger than a chunk is cut into pieces of a multiple of
//     kChunkAlignElements (128, a multiple of every codec block size), the
//     last piece of each row taking the rest; no chunk crosses a row.
// Chunks are assigned to servers by greedy byte balance: largest first (ties
// by tensor id, then index) to the least-loaded server (ties by the lower
// shard id). That leaves up to one chunk between the most- and least-loaded
// server (with few chunks per server, e.g. co-located servers, 10 to 15 % of
// a server's share), so the tail of a chunk of the most-loaded server is
// then split off to the least-loaded one, at a row boundary (or a
// kChunkAlignElements one inside a long row), until no split narrows the
// gap: the loads end within about a row of each other, and a split chunk's
// parts are smaller than chunk_bytes, never larger. Every server's link
// then carries its share (a server moves P times its load each way). The
// chunks of a tensor are indexed 0, 1, ... in offset order. The result is
// deterministic.
//
// Thread safety: a pure function.
#ifndef GIFT_SERVER_COORDINATOR_SHARD_MAP_H_
#define GIFT_SERVER_COORDINATOR_SHARD_MAP_H_

#include <cstdint>
#include <vector>

#include "gift/v1/cluster.pb.h"

namespace gift::coordinator {

inline constexpr uint64_t kChunkAlignElements = 128;

// The chunks of one tensor (server_rank left 0), in index order.
std::vector<gift::v1::Chunk> CutTensor(const gift::v1::TensorInfo& tensor, uint64_t chunk_bytes);

// The shard map of `tensors` over `num_servers` servers for `epoch`. With no
// servers the map has no chunks (nothing can be reduced until a server
// joins); `epoch` and `chunk_bytes` are still set. chunk_bytes below
// 4 * kChunkAlignElements is raised to it.
gift::v1::ShardMap ComputeShardMap(const std::vector<gift::v1::TensorInfo>& tensors,
                                   uint32_t num_servers, uint64_t chunk_bytes, uint64_t epoch);

// `map` with the chunks of `added` tensors (not yet in it) assigned by the
// same rule (greedy, then splitting only new chunks) on top of the existing
// loads, moving or splitting no existing chunk.
// Used when tensors are registered within an epoch. With no servers the map
// stays without chunks.
gift::v1::ShardMap ExtendShardMap(const gift::v1::ShardMap& map,
                                  const std::vector<gift::v1::TensorInfo>& added,
                                  uint32_t num_servers);

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_SHARD_MAP_H_
