// The stochastic-rounding key of a chunk's encoding, the one definition the
// worker (its pushes) and the aggregator (its results) share, so every chunk
// of a tensor draws its own random stream and no two encoders of one step
// reuse one:
//
//   push of rank r:  ChunkRngKey(tensor, chunk, step, r)
//   result:          ChunkRngKey(tensor, chunk, step, kResultRngRank)
//
// The key is unique per (tensor, chunk) while tensor ids stay below 2^40 and
// chunk indices below 2^24 (shard maps cut far fewer chunks).
//
// Thread safety: pure functions.
#ifndef GIFT_COMMON_DATAPLANE_CHUNK_RNG_KEY_H_
#define GIFT_COMMON_DATAPLANE_CHUNK_RNG_KEY_H_

#include <cstdint>

#include "common/codec/codec_spec.h"

namespace gift::dataplane {

// The rank a result is encoded under: no worker's rank (ranks are below the
// world size, itself below 2^32 - 1).
inline constexpr uint32_t kResultRngRank = 0xFFFFFFFFu;

constexpr codec::RngKey ChunkRngKey(uint64_t tensor_id, uint32_t chunk_index, uint64_t step,
                                    uint32_t rank) {
  return codec::RngKey{.tensor = (tensor_id << 24) | (chunk_index & 0xFFFFFFu),
                       .step = step,
                       .rank = rank};
}

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_CHUNK_RNG_KEY_H_
