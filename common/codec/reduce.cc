#include "common/codec/reduce.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/codec/pieces.h"
#include "common/codec/scalar.h"

namespace gift::codec {

namespace {

// The checks both reductions share: equal shapes, valid specs, non-null
// buffers; fills the inputs' layouts.
absl::Status CheckInputs(absl::Span<const EncodedView> inputs, const MutableEncodedView& out,
                         absl::InlinedVector<EncodedLayout, 8>& layouts) {
  if (inputs.empty()) return absl::InvalidArgumentError("reduce needs at least one input");
  const uint64_t rows = inputs[0].rows, cols = inputs[0].cols;
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
  return absl::OkStatus();
}

}  // namespace

absl::Status ReduceEncoded(absl::Span<const EncodedView> inputs, float* sum, float post_scale,
                           const MutableEncodedView& out, const RngKey& key,
                           const CodecOptions& options) {
  absl::InlinedVector<EncodedLayout, 8> layouts;
  if (absl::Status s = CheckInputs(inputs, out, layouts); !s.ok()) return s;
  const uint64_t rows = inputs[0].rows, cols = inputs[0].cols;
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

uint64_t ReduceScratchFloats(uint64_t cols) { return cols; }

absl::Status ReduceEncodedBlocked(absl::Span<const EncodedView> inputs, float post_scale,
                                  const MutableEncodedView& out, absl::Span<float> scratch,
                                  const RngKey& key, const CodecOptions& options) {
  absl::InlinedVector<EncodedLayout, 8> layouts;
  if (absl::Status s = CheckInputs(inputs, out, layouts); !s.ok()) return s;
  if (out.codes == nullptr && layouts[0].num_elements > 0) {
    return absl::InvalidArgumentError("reduce output codes buffer is null");
  }
  const uint64_t rows = inputs[0].rows, cols = inputs[0].cols;
  if (layouts[0].num_elements == 0) return absl::OkStatus();
  if (scratch.size() < ReduceScratchFloats(cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce scratch holds ", scratch.size(), " floats, a row needs ", cols));
  }
  const internal::ElementLoops& loops = internal::PickLoops(options.use_simd);
  EncodedLayout out_layout;
  if (absl::Status s = internal::CheckEncodeTarget(out, scratch.data(), &out_layout); !s.ok()) {
    return s;
  }
  // FP32 results are summed straight into the output's codes: the FP32
  // encoding of the sum is its bit pattern.
  const bool f32_out = out.spec.format == Format::kF32 && out.spec.scaling == Scaling::kNone;
  internal::PieceEncoder encoder(out, out_layout, loops, key);
  // Sums one piece, in rank order, into row[c0, c1) and scales it.
  auto sum_piece = [&](const internal::Piece& piece, float* row) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      internal::DecodePiece(inputs[k], layouts[k], loops, piece, row, /*accumulate=*/k > 0);
    }
    if (post_scale != 1.0f) {
      for (uint64_t c = piece.c0; c < piece.c1; ++c) row[c] = row[c] * post_scale;
    }
  };
  auto piece_amax = [&](const internal::Piece& piece, const float* row) {
    uint32_t m;
    loops.block_amax(row + piece.c0, piece.c1 - piece.c0, piece.c1 - piece.c0, &m);
    return m;
  };
  auto for_each_piece = [&](auto&& fn) {
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c0 = 0; c0 < cols; c0 += internal::kPieceCols) {
        if (!fn(internal::Piece{r, c0, std::min(cols, c0 + internal::kPieceCols)})) return false;
      }
    }
    return true;
  };
  float* const row = scratch.data();
  if (f32_out) {
    float* const sum = reinterpret_cast<float*>(out.codes);
    uint32_t amax = 0;
    for_each_piece([&](const internal::Piece& piece) {
      sum_piece(piece, sum + piece.row * cols);
      amax = std::max(amax, piece_amax(piece, sum + piece.row * cols));
      return true;
    });
    if (amax >= scalar::kInfBits) {
      return internal::NonFiniteError("summed", sum, rows * cols, cols);
    }
    return absl::OkStatus();
  }
  // Unscaled outputs (bf16, ...) need the tensor's amax only to refuse a
  // non-finite sum, which each piece checks before it is encoded.
  const bool unscaled = out.spec.scaling == Scaling::kNone;
  if (!encoder.NeedsTensorAmax() || unscaled) {
    // Each piece is encoded while its sum is in cache (block-scaled outputs
    // check finiteness per block as they encode).
    uint64_t bad_row = 0;
    const bool finite = for_each_piece([&](const internal::Piece& piece) {
      sum_piece(piece, row);
      bad_row = piece.row;
      if (unscaled) {
        if (piece_amax(piece, row) >= scalar::kInfBits) return false;
      }
      return encoder.EncodePiece(row, piece);
    });
    if (finite) return absl::OkStatus();
    const internal::Piece whole_row{bad_row, 0, cols};
    sum_piece(whole_row, row);
    return internal::NonFiniteError("summed", row, cols, cols);  // names the column
  }
  // The scale depends on the whole chunk's amax: a first pass finds it, a
  // second one sums each piece again and encodes it.
  uint32_t amax = 0;
  uint64_t bad_row = 0;
  const bool finite = for_each_piece([&](const internal::Piece& piece) {
    sum_piece(piece, row);
    amax = std::max(amax, piece_amax(piece, row));
    bad_row = piece.row;
    return amax < scalar::kInfBits;
  });
  if (!finite) {
    sum_piece(internal::Piece{bad_row, 0, cols}, row);
    return internal::NonFiniteError("summed", row, cols, cols);
  }
  encoder.SetTensorAmax(amax);
  for_each_piece([&](const internal::Piece& piece) {
    sum_piece(piece, row);
    encoder.EncodePiece(row, piece);  // finite: checked above
    return true;
  });
  return absl::OkStatus();
}

}  // namespace gift::codec
