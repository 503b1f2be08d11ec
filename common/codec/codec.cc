#include "common/codec/codec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/codec/element_loops.h"
#include "common/codec/pieces.h"
#include "common/codec/scalar.h"

namespace gift::codec {
namespace {

float LoadFloat(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof(f));
  return f;
}

void StoreFloat(uint8_t* p, float f) { std::memcpy(p, &f, sizeof(f)); }

// Byte offset of element (row, col)'s code.
uint64_t CodeOffset(const CodecSpec& spec, const EncodedLayout& layout, uint64_t row,
                    uint64_t col) {
  if (spec.format == Format::kNvfp4) return row * layout.row_code_bytes + col / 2;
  return (row * layout.cols + col) * static_cast<uint64_t>(BitsPerElement(spec.format) / 8);
}

}  // namespace

namespace internal {

void ForEachPiece(uint64_t rows, uint64_t cols, ThreadPool* pool,
                  const std::function<void(const Piece&)>& fn) {
  if (rows == 0 || cols == 0) return;
  const uint64_t per_row = (cols + kPieceCols - 1) / kPieceCols;
  const uint64_t total = rows * per_row;
  const uint64_t piece_elems = std::min(cols, kPieceCols);
  const uint64_t per_task = std::max<uint64_t>(1, kTaskElements / piece_elems);
  const uint64_t tasks = (total + per_task - 1) / per_task;
  ParallelFor(pool, tasks, [&](size_t t) {
    const uint64_t end = std::min(total, (t + 1) * per_task);
    for (uint64_t p = t * per_task; p < end; ++p) {
      const uint64_t row = p / per_row;
      const uint64_t c0 = (p % per_row) * kPieceCols;
      fn(Piece{row, c0, std::min(cols, c0 + kPieceCols)});
    }
  });
}

const ElementLoops& PickLoops(bool use_simd) {
  if (use_simd) {
    if (const ElementLoops* avx2 = Avx2Loops()) return *avx2;
  }
  return ScalarLoops();
}

namespace {


}  // namespace

// The decode factor of block q.
float BlockScale(const EncodedView& in, const EncodedLayout& layout, uint64_t q) {
  switch (in.spec.scaling) {
    case Scaling::kPerBlockFp32: return LoadFloat(in.scales + 4 * q);
    case Scaling::kPerBlockE8M0: return scalar::E8M0ToFloat(in.scales[q]);
    case Scaling::kNvfp4:
      return scalar::Nvfp4EffectiveScale(in.scales[q],
                                         LoadFloat(in.scales + layout.num_blocks));
    default: return 1.0f;
  }
}

void DecodePiece(const EncodedView& in, const EncodedLayout& layout, const ElementLoops& loops,
                 const Piece& piece, float* out_row, bool accumulate) {
  const CodecSpec& spec = in.spec;
  const uint64_t len = piece.c1 - piece.c0;
  const uint8_t* codes = in.codes + CodeOffset(spec, layout, piece.row, piece.c0);
  if (spec.scaling == Scaling::kNone || spec.scaling == Scaling::kPerTensor) {
    const float scale = spec.scaling == Scaling::kNone ? 1.0f : LoadFloat(in.scales);
    loops.dequantize(spec.format, codes, len, len, &scale, out_row + piece.c0, accumulate);
    return;
  }
  const uint64_t b = spec.block_size;
  const uint64_t first_block = piece.row * layout.blocks_per_row + piece.c0 / b;
  float scales[kPieceCols / 16];
  for (uint64_t j = 0; j * b < len; ++j) scales[j] = BlockScale(in, layout, first_block + j);
  loops.dequantize(spec.format, codes, len, b, scales, out_row + piece.c0, accumulate);
}

}  // namespace internal

namespace {

using internal::ElementLoops;
using internal::Piece;
using internal::StochasticStream;

absl::Status NonFiniteError(const float* x, uint64_t n, uint64_t cols) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      const char* what = std::isnan(x[i]) ? "NaN" : (x[i] > 0 ? "+Inf" : "-Inf");
      return absl::InvalidArgumentError(absl::StrCat(
          "input element ", i, " (row ", i / cols, ", column ", i % cols, ") is ", what,
          "; the codec encodes finite values only"));
    }
  }
  return absl::InternalError("non-finite input reported but not found");
}

absl::Status CheckPointers(const EncodedLayout& layout, const void* data, const char* data_name,
                           const void* codes, const void* scales) {
  if (layout.num_elements == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError(absl::StrCat(data_name, " is null"));
  if (codes == nullptr) return absl::InvalidArgumentError("codes buffer is null");
  if (layout.scale_bytes > 0 && scales == nullptr) {
    return absl::InvalidArgumentError("scales buffer is null");
  }
  return absl::OkStatus();
}

// max |bits| over the whole tensor, in parallel.
uint32_t TensorAmaxBits(const float* x, uint64_t n, const ElementLoops& loops, ThreadPool* pool) {
  const uint64_t tasks = (n + internal::kTaskElements - 1) / internal::kTaskElements;
  std::vector<uint32_t> partial(tasks, 0);
  ParallelFor(pool, tasks, [&](size_t t) {
    const uint64_t b = t * internal::kTaskElements;
    const uint64_t len = std::min(internal::kTaskElements, n - b);
    loops.block_amax(x + b, len, len, &partial[t]);
  });
  uint32_t m = 0;
  for (uint32_t v : partial) m = std::max(m, v);
  return m;
}

}  // namespace

bool CpuHasAvx2() { return internal::Avx2Loops() != nullptr; }

double EncodedErrorBound(const EncodedView& in, uint64_t row, uint64_t col, double x) {
  const CodecSpec& spec = in.spec;
  if (spec.scaling == Scaling::kNone) return ElementErrorBound(spec.format, spec.rounding, 1.0, x);
  if (spec.scaling == Scaling::kPerTensor) {
    return ElementErrorBound(spec.format, spec.rounding, LoadFloat(in.scales), x);
  }
  const uint64_t blocks_per_row = (in.cols + spec.block_size - 1) / spec.block_size;
  const uint64_t q = row * blocks_per_row + col / spec.block_size;
  const EncodedLayout layout{.num_blocks = in.rows * blocks_per_row};
  return ElementErrorBound(spec.format, spec.rounding,
                           internal::BlockScale(in, layout, q), x);
}

absl::Status Encode(const float* x, const MutableEncodedView& out, const RngKey& key,
                    const CodecOptions& options) {
  absl::StatusOr<EncodedLayout> layout_or = ComputeLayout(out.spec, out.rows, out.cols);
  if (!layout_or.ok()) return layout_or.status();
  const EncodedLayout& layout = *layout_or;
  if (absl::Status s = CheckPointers(layout, x, "input", out.codes, out.scales); !s.ok()) return s;
  if (layout.num_elements == 0) {
    // Keep the tensor-level scale of an empty tensor well-formed.
    if (out.scales != nullptr && out.spec.scaling == Scaling::kPerTensor) {
      StoreFloat(out.scales, 0.0f);
    } else if (out.scales != nullptr && out.spec.scaling == Scaling::kNvfp4) {
      StoreFloat(out.scales + layout.num_blocks, scalar::Nvfp4TensorScale(0));
    }
    return absl::OkStatus();
  }
  const CodecSpec& spec = out.spec;
  const uint64_t n = layout.num_elements;
  const uint64_t cols = layout.cols;
  const ElementLoops& loops = internal::PickLoops(options.use_simd);
  const StochasticStream stream{scalar::MakePhiloxKey(key.tensor, key.rank), key.step};
  const StochasticStream* sr = spec.rounding == Rounding::kStochastic ? &stream : nullptr;
  const float fmt_max = FormatMax(spec.format);

  if (spec.scaling == Scaling::kNone || spec.scaling == Scaling::kPerTensor) {
    const uint32_t amax = TensorAmaxBits(x, n, loops, options.pool);
    if (amax >= scalar::kInfBits) return NonFiniteError(x, n, cols);
    float inv = 1.0f;
    if (spec.scaling == Scaling::kPerTensor) {
      const float s = scalar::ScaleFromAmax(amax, fmt_max);
      StoreFloat(out.scales, s);
      inv = scalar::InverseScale(s);
    }
    const uint64_t bytes = BitsPerElement(spec.format) / 8;
    const uint64_t tasks = (n + internal::kTaskElements - 1) / internal::kTaskElements;
    ParallelFor(options.pool, tasks, [&](size_t t) {
      const uint64_t b = t * internal::kTaskElements;
      const uint64_t len = std::min(internal::kTaskElements, n - b);
      loops.quantize(spec.format, x + b, len, len, &inv, sr, b, out.codes + b * bytes);
    });
    return absl::OkStatus();
  }

  // Block scaling. NVFP4 needs the tensor amax first for its second level.
  float tensor_scale = 0.0f, inv_tensor_scale = 0.0f;
  if (spec.scaling == Scaling::kNvfp4) {
    const uint32_t amax = TensorAmaxBits(x, n, loops, options.pool);
    if (amax >= scalar::kInfBits) return NonFiniteError(x, n, cols);
    tensor_scale = scalar::Nvfp4TensorScale(amax);
    inv_tensor_scale = 1.0f / tensor_scale;
    StoreFloat(out.scales + layout.num_blocks, tensor_scale);
  }
  const uint64_t bsize = spec.block_size;
  std::atomic<bool> non_finite{false};
  internal::ForEachPiece(layout.rows, cols, options.pool, [&](const Piece& piece) {
    const float* xp = x + piece.row * cols + piece.c0;
    const uint64_t len = piece.c1 - piece.c0;
    const uint64_t nblocks = (len + bsize - 1) / bsize;
    const uint64_t q0 = piece.row * layout.blocks_per_row + piece.c0 / bsize;
    uint32_t amax[internal::kPieceCols / 16];
    float inv[internal::kPieceCols / 16];
    loops.block_amax(xp, len, bsize, amax);
    for (uint64_t j = 0; j < nblocks; ++j) {
      if (amax[j] >= scalar::kInfBits) {
        non_finite.store(true, std::memory_order_relaxed);
        return;
      }
    }
    loops.block_scales(spec, amax, nblocks, tensor_scale, inv_tensor_scale,
                       out.scales + (spec.scaling == Scaling::kPerBlockFp32 ? 4 * q0 : q0), inv);
    loops.quantize(spec.format, xp, len, bsize, inv, sr, piece.row * cols + piece.c0,
                   out.codes + CodeOffset(spec, layout, piece.row, piece.c0));
  });
  if (non_finite.load()) return NonFiniteError(x, n, cols);
  return absl::OkStatus();
}

namespace {

absl::Status DecodeImpl(const EncodedView& in, float* out, bool accumulate,
                        const CodecOptions& options) {
  absl::StatusOr<EncodedLayout> layout = ComputeLayout(in.spec, in.rows, in.cols);
  if (!layout.ok()) return layout.status();
  if (absl::Status s = CheckPointers(*layout, out, "output", in.codes, in.scales); !s.ok()) {
    return s;
  }
  const ElementLoops& loops = internal::PickLoops(options.use_simd);
  internal::ForEachPiece(layout->rows, layout->cols, options.pool, [&](const Piece& piece) {
    internal::DecodePiece(in, *layout, loops, piece, out + piece.row * layout->cols, accumulate);
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status Decode(const EncodedView& in, float* out, const CodecOptions& options) {
  return DecodeImpl(in, out, /*accumulate=*/false, options);
}

absl::Status DecodeAccumulate(const EncodedView& in, float* acc, const CodecOptions& options) {
  return DecodeImpl(in, acc, /*accumulate=*/true, options);
}

}  // namespace gift::codec
