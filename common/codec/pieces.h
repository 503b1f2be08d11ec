// Internal to the codec: how the CPU paths cut a tensor into independent
// pieces of work, and the per-piece encode/decode used by codec.cc and
// reduce.cc.
//
// A piece is a run [c0, c1) of one row with c0 a multiple of kPieceCols, so a
// piece holds whole scaling blocks of every block size (16, 32, 128) and
// NVFP4 pieces start on a byte boundary.
#ifndef GIFT_COMMON_CODEC_PIECES_H_
#define GIFT_COMMON_CODEC_PIECES_H_

#include <cstdint>
#include <functional>

#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "common/codec/element_loops.h"
#include "common/codec/encoded_tensor.h"

namespace gift::codec::internal {

inline constexpr uint64_t kPieceCols = 128 * 64;
// Roughly this many elements per parallel task.
inline constexpr uint64_t kTaskElements = 1 << 16;

struct Piece {
  uint64_t row;
  uint64_t c0;
  uint64_t c1;
};

// Calls fn on every piece of a rows x cols tensor, in parallel on `pool`.
void ForEachPiece(uint64_t rows, uint64_t cols, ThreadPool* pool,
                  const std::function<void(const Piece&)>& fn);

const ElementLoops& PickLoops(bool use_simd);

// The factor the codes of block q of a block-scaled tensor are multiplied by.
float BlockScale(const EncodedView& in, const EncodedLayout& layout, uint64_t q);

// Decodes one piece of `in` into out[c0 .. c1) of its row, where `out_row`
// points at element (row, 0) of the destination.
void DecodePiece(const EncodedView& in, const EncodedLayout& layout, const ElementLoops& loops,
                 const Piece& piece, float* out_row, bool accumulate);

}  // namespace gift::codec::internal

#endif  // GIFT_COMMON_CODEC_PIECES_H_
