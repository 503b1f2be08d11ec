#include "common/codec/reduce.h"

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/pieces.h"
#include "common/codec/scalar.h"

namespace gift::codec {

absl::Status ReduceEncoded(absl::Span<const EncodedView> inputs, float* sum, float post_scale,
                           const MutableEncodedView& out, const RngKey& key,
                           const CodecOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("reduce needs at least one input");
  const uint64_t rows = inputs[0].rows, cols = inputs[0].cols;
  std::vector<EncodedLayout> layouts;
  layouts.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const EncodedView& in = inputs[k];
    if (in.rows != rows || in.cols != cols) {
      return absl::InvalidArgumentError(absl::StrCat("reduce input ", k, " is ", in.rows, " x ",
                                                     in.cols, ", input 0 is ", rows, " x ", cols));
    }
    absl::StatusOr<EncodedLayout> layout = ComputeLayout(in.spec, rows, cols);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce input ", k, ": ", layout.status().message()));
    }
    if (layout->num_elements > 0 &&
        (in.codes == nullptr || (layout->scale_bytes > 0 && in.scales == nullptr))) {
      return absl::InvalidArgumentError(absl::StrCat("reduce input ", k, " has a null buffer"));
    }
    layouts.push_back(*layout);
  }
  if (out.codes != nullptr && (out.rows != rows || out.cols != cols)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce output is ", out.rows, " x ", out.cols,
                                                   ", inputs are ", rows, " x ", cols));
  }
  if (sum == nullptr && layouts[0].num_elements > 0) {
    return absl::InvalidArgumentError("reduce sum buffer is null");
  }
  const internal::ElementLoops& loops = internal::PickLoops(options.use_simd);
  const uint64_t n = rows * cols;
  EncodedLayout out_layout;
  const bool encode = out.codes != nullptr;
  if (encode) {
    if (absl::Status s = internal::CheckEncodeTarget(out, sum, &out_layout); !s.ok()) return s;
  }
  // Block-scaled outputs (without a tensor-level scale) are encoded piece by
  // piece right after the piece is summed, while it is in cache; the others
  // record the amax of each piece and are encoded in a second pass.
  internal::PieceEncoder encoder(out, out_layout, loops, key);
  const bool fused = encode && !encoder.NeedsTensorAmax();
  std::atomic<uint32_t> amax{0};
  std::atomic<bool> non_finite{false};
  internal::ForEachPiece(rows, cols, options.pool, [&](const internal::Piece& piece) {
    float* row = sum + piece.row * cols;
    for (size_t k = 0; k < inputs.size(); ++k) {
      internal::DecodePiece(inputs[k], layouts[k], loops, piece, row, /*accumulate=*/k > 0);
    }
    if (post_scale != 1.0f) {
      for (uint64_t c = piece.c0; c < piece.c1; ++c) row[c] = row[c] * post_scale;
    }
    if (fused) {
      if (!encoder.EncodePiece(row, piece)) non_finite.store(true, std::memory_order_relaxed);
    } else if (encode) {
      uint32_t m;
      loops.block_amax(row + piece.c0, piece.c1 - piece.c0, piece.c1 - piece.c0, &m);
      uint32_t seen = amax.load(std::memory_order_relaxed);
      while (m > seen && !amax.compare_exchange_weak(seen, m, std::memory_order_relaxed)) {
      }
    }
  });
  if (!encode || n == 0) return absl::OkStatus();
  if (non_finite.load() || amax.load() >= scalar::kInfBits) {
    return internal::NonFiniteError("summed", sum, n, cols);
  }
  if (fused) return absl::OkStatus();
  encoder.SetTensorAmax(amax.load());
  if (!encoder.IsBlockScaled()) {
    encoder.QuantizeFlat(sum, options.pool);
    return absl::OkStatus();
  }
  internal::ForEachPiece(rows, cols, options.pool, [&](const internal::Piece& piece) {
    encoder.EncodePiece(sum + piece.row * cols, piece);  // finite: checked above
  });
  return absl::OkStatus();
}

}  // namespace gift::codec
