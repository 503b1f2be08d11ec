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

#include "absl/status/status.h"
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

// Encodes into one output: per-tensor state (scale, rounding stream) plus
// per-piece work, so that callers can encode pieces as they produce them
// (the reduction does, while the piece is still in cache).
// Thread-compatible: EncodePiece / QuantizeFlat may run concurrently once
// SetTensorAmax (if needed) has been called.
class PieceEncoder {
 public:
  PieceEncoder(const MutableEncodedView& out, const EncodedLayout& layout,
               const ElementLoops& loops, const RngKey& key);

  // kNone, kPerTensor and kNvfp4 need the amax of the whole tensor (finite)
  // before any piece is encoded; SetTensorAmax stores the tensor scale.
  bool NeedsTensorAmax() const;
  void SetTensorAmax(uint32_t amax_bits);

  bool IsBlockScaled() const;

  // Encodes the piece of x whose row starts at x_row. False (and nothing
  // written for that piece's bad block onwards) when it holds NaN or Inf;
  // only block-scaled specs check here.
  bool EncodePiece(const float* x_row, const Piece& piece) const;

  // Encodes the whole tensor x for a spec without blocks, in flat chunks.
  void QuantizeFlat(const float* x, ThreadPool* pool) const;

 private:
  MutableEncodedView out_;
  EncodedLayout layout_;
  const ElementLoops& loops_;
  StochasticStream stream_;
  const StochasticStream* sr_;
  float inv_ = 1.0f;
  float tensor_scale_ = 0.0f;
  float inv_tensor_scale_ = 0.0f;
};

// Validates an encode target (spec, sizes, pointers) and fills `layout`.
absl::Status CheckEncodeTarget(const MutableEncodedView& out, const void* x, EncodedLayout* layout);

// InvalidArgument naming the first non-finite element of x ("input element
// 12 (row 0, column 12) is NaN ...", with `what` in place of "input").
absl::Status NonFiniteError(const char* what, const float* x, uint64_t n, uint64_t cols);

}  // namespace gift::codec::internal

#endif  // GIFT_COMMON_CODEC_PIECES_H_
