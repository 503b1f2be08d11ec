#include "common/codec/codec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
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

namespace {}  // namespace

// The decode factor of block q.
float BlockScale(const EncodedView& in, const EncodedLayout& layout, uint64_t q) {
  switch (in.spec.scaling) {
    case Scaling::kPerBlockFp32:
      return LoadFloat(in.scales + 4 * q);
    case Scaling::kPerBlockE8M0:
      return scalar::E8M0ToFloat(in.scales[q]);
    case Scaling::kNvfp4:
      return scalar::Nvfp4EffectiveScale(in.scales[q], LoadFloat(in.scales + layout.num_blocks));
    default:
      return 1.0f;
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

float EffectiveScale(const EncodedView& in, uint64_t row, uint64_t col) {
  switch (in.spec.scaling) {
    case Scaling::kNone:
      return 1.0f;
    case Scaling::kPerTensor:
      return LoadFloat(in.scales);
    default:
      break;
  }
  const absl::StatusOr<EncodedLayout> layout = ComputeLayout(in.spec, in.rows, in.cols);
  if (!layout.ok()) return std::numeric_limits<float>::quiet_NaN();
  return internal::BlockScale(in, *layout, row * layout->blocks_per_row + col / in.spec.block_size);
}

double EncodedErrorBound(const EncodedView& in, uint64_t row, uint64_t col, double x) {
  return ElementErrorBound(in.spec.format, in.spec.rounding, EffectiveScale(in, row, col), x);
}

namespace internal {

PieceEncoder::PieceEncoder(const MutableEncodedView& out, const EncodedLayout& layout,
                           const ElementLoops& loops, const RngKey& key)
    : out_(out),
      layout_(layout),
      loops_(loops),
      stream_{scalar::MakePhiloxKey(key.tensor, key.rank), key.step},
      sr_(out.spec.rounding == Rounding::kStochastic ? &stream_ : nullptr) {}

bool PieceEncoder::NeedsTensorAmax() const {
  return out_.spec.scaling == Scaling::kNone || out_.spec.scaling == Scaling::kPerTensor ||
         out_.spec.scaling == Scaling::kNvfp4;
}

void PieceEncoder::SetTensorAmax(uint32_t amax) {
  switch (out_.spec.scaling) {
    case Scaling::kPerTensor: {
      const float s = scalar::ScaleFromAmax(amax, FormatMax(out_.spec.format));
      StoreFloat(out_.scales, s);
      inv_ = scalar::InverseScale(s);
      break;
    }
    case Scaling::kNvfp4:
      tensor_scale_ = scalar::Nvfp4TensorScale(amax);
      inv_tensor_scale_ = 1.0f / tensor_scale_;
      StoreFloat(out_.scales + layout_.num_blocks, tensor_scale_);
      break;
    default:
      break;
  }
}

void PieceEncoder::QuantizeFlat(const float* x, ThreadPool* pool) const {
  const uint64_t n = layout_.num_elements;
  const uint64_t bytes = BitsPerElement(out_.spec.format) / 8;
  const uint64_t tasks = (n + kTaskElements - 1) / kTaskElements;
  ParallelFor(pool, tasks, [&](size_t t) {
    const uint64_t b = t * kTaskElements;
    const uint64_t len = std::min(kTaskElements, n - b);
    loops_.quantize(out_.spec.format, x + b, len, len, &inv_, sr_, b, out_.codes + b * bytes);
  });
}

bool PieceEncoder::EncodePiece(const float* x_row, const Piece& piece) const {
  const CodecSpec& spec = out_.spec;
  const float* xp = x_row + piece.c0;
  const uint64_t len = piece.c1 - piece.c0;
  const uint64_t first = piece.row * layout_.cols + piece.c0;
  uint8_t* codes = out_.codes + CodeOffset(spec, layout_, piece.row, piece.c0);
  if (!IsBlockScaled()) {
    loops_.quantize(spec.format, xp, len, len, &inv_, sr_, first, codes);
    return true;
  }
  const uint64_t bsize = spec.block_size;
  const uint64_t nblocks = (len + bsize - 1) / bsize;
  const uint64_t q0 = piece.row * layout_.blocks_per_row + piece.c0 / bsize;
  uint32_t amax[kPieceCols / 16];
  float inv[kPieceCols / 16];
  loops_.block_amax(xp, len, bsize, amax);
  for (uint64_t j = 0; j < nblocks; ++j) {
    if (amax[j] >= scalar::kInfBits) return false;
  }
  uint8_t* scales = out_.scales + (spec.scaling == Scaling::kPerBlockFp32 ? 4 * q0 : q0);
  loops_.block_scales(spec, amax, nblocks, tensor_scale_, inv_tensor_scale_, scales, inv);
  if (spec.block_scale_fit == BlockScaleFit::kLeastSquares) {
    loops_.fit_nvfp4_scales(xp, len, tensor_scale_, scales, inv);
  }
  loops_.quantize(spec.format, xp, len, bsize, inv, sr_, first, codes);
  return true;
}

bool PieceEncoder::IsBlockScaled() const {
  return out_.spec.scaling != Scaling::kNone && out_.spec.scaling != Scaling::kPerTensor;
}

absl::Status NonFiniteError(const char* what, const float* x, uint64_t n, uint64_t cols) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      const char* kind = std::isnan(x[i]) ? "NaN" : (x[i] > 0 ? "+Inf" : "-Inf");
      return absl::InvalidArgumentError(absl::StrCat(what, " element ", i, " (row ", i / cols,
                                                     ", column ", i % cols, ") is ", kind,
                                                     "; the codec encodes finite values only"));
    }
  }
  return absl::InternalError("non-finite value reported but not found");
}

absl::Status CheckEncodeTarget(const MutableEncodedView& out, const void* x,
                               EncodedLayout* layout) {
  absl::StatusOr<EncodedLayout> l = ComputeLayout(out.spec, out.rows, out.cols);
  if (!l.ok()) return l.status();
  *layout = *l;
  if (absl::Status s = CheckPointers(*layout, x, "input", out.codes, out.scales); !s.ok()) {
    return s;
  }
  if (layout->num_elements == 0 && out.scales != nullptr) {
    // Keep the tensor-level scale of an empty tensor well-formed.
    if (out.spec.scaling == Scaling::kPerTensor) StoreFloat(out.scales, 0.0f);
    if (out.spec.scaling == Scaling::kNvfp4) {
      StoreFloat(out.scales + layout->num_blocks, scalar::Nvfp4TensorScale(0));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status Encode(const float* x, const MutableEncodedView& out, const RngKey& key,
                    const CodecOptions& options) {
  EncodedLayout layout;
  if (absl::Status s = internal::CheckEncodeTarget(out, x, &layout); !s.ok()) return s;
  const uint64_t n = layout.num_elements;
  if (n == 0) return absl::OkStatus();
  const ElementLoops& loops = internal::PickLoops(options.use_simd);
  internal::PieceEncoder encoder(out, layout, loops, key);
  if (encoder.NeedsTensorAmax()) {
    const uint32_t amax = TensorAmaxBits(x, n, loops, options.pool);
    if (amax >= scalar::kInfBits) return internal::NonFiniteError("input", x, n, layout.cols);
    encoder.SetTensorAmax(amax);
  }
  if (!encoder.IsBlockScaled()) {
    encoder.QuantizeFlat(x, options.pool);
    return absl::OkStatus();
  }
  std::atomic<bool> non_finite{false};
  internal::ForEachPiece(layout.rows, layout.cols, options.pool, [&](const Piece& piece) {
    if (!encoder.EncodePiece(x + piece.row * layout.cols, piece)) {
      non_finite.store(true, std::memory_order_relaxed);
    }
  });
  if (non_finite.load()) return internal::NonFiniteError("input", x, n, layout.cols);
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
