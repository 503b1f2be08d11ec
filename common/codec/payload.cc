#include "common/codec/payload.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "common/codec/element_loops.h"
#include "common/codec/scalar.h"

namespace gift::codec {
namespace {

constexpr uint32_t kMagic = 0x50544647u;  // "GFTP" read little-endian
constexpr size_t kChecksumOffset = 40;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

uint64_t Pad8(uint64_t n) { return (8 - n % 8) % 8; }

uint32_t PayloadChecksum(const uint8_t* p, size_t n) {
  uint32_t crc = crc32c::Extend(0, p, kChecksumOffset);
  const uint32_t zero = 0;
  crc = crc32c::Extend(crc, &zero, 4);
  return crc32c::Extend(crc, p + kChecksumOffset + 4, n - kChecksumOffset - 4);
}

struct RowsCols {
  uint64_t rows;
  uint64_t cols;
  uint64_t elements;
};

// rows = product of all dims but the last, cols = the last; checked.
absl::StatusOr<RowsCols> ShapeRowsCols(absl::Span<const uint64_t> shape) {
  if (shape.empty() || shape.size() > kPayloadMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("a payload shape has 1 to ", kPayloadMaxDims, " dims, got ", shape.size()));
  }
  RowsCols rc{1, shape.back(), 0};
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (__builtin_mul_overflow(rc.rows, shape[d], &rc.rows)) {
      return absl::InvalidArgumentError("shape's element count overflows 64 bits");
    }
  }
  if (__builtin_mul_overflow(rc.rows, rc.cols, &rc.elements)) {
    return absl::InvalidArgumentError("shape's element count overflows 64 bits");
  }
  return rc;
}

absl::Status CheckShape(const EncodedView& view, absl::Span<const uint64_t> shape) {
  absl::StatusOr<RowsCols> rc = ShapeRowsCols(shape);
  if (!rc.ok()) return rc.status();
  if (rc->rows != view.rows || rc->cols != view.cols) {
    return absl::InvalidArgumentError(absl::StrCat("shape is ", rc->rows, " x ", rc->cols,
                                                   " as rows x cols, the encoded tensor is ",
                                                   view.rows, " x ", view.cols));
  }
  return absl::OkStatus();
}

// ---- finding non-finite codes ------------------------------------------------
// A code of width W bytes (1, 2 or 4, little-endian) is NaN/Inf exactly when
// its exponent bits are all ones: (code & mask) == mask, with mask 0x7F
// (E4M3: exponent and mantissa), 0x7C (E5M2), 0x7F80 (bf16), 0x7F800000
// (FP32). The scan is one pass over every pushed byte, so it is vectorized;
// the exact index is found only once a 128-byte stretch has a bad code.

template <int W>
uint32_t LoadCode(const uint8_t* p) {
  if constexpr (W == 1) return p[0];
  if constexpr (W == 2) return Load<uint16_t>(p);
  if constexpr (W == 4) return Load<uint32_t>(p);
}

// Index of the first of codes [begin, n) that matches `mask`, or n.
template <int W>
uint64_t FirstMatchPortable(const uint8_t* p, uint64_t begin, uint64_t n, uint32_t mask) {
  for (uint64_t i = begin; i < n; ++i) {
    if ((LoadCode<W>(p + W * i) & mask) == mask) return i;
  }
  return n;
}

#if defined(__x86_64__)
template <int W>
__attribute__((target("avx2"))) inline __m256i MatchVec(const uint8_t* p, __m256i mask) {
  const __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i*)p), mask);
  if constexpr (W == 1) return _mm256_cmpeq_epi8(v, mask);
  if constexpr (W == 2) return _mm256_cmpeq_epi16(v, mask);
  if constexpr (W == 4) return _mm256_cmpeq_epi32(v, mask);
}

template <int W>
__attribute__((target("avx2"))) uint64_t FirstMatchAvx2(const uint8_t* p, uint64_t n,
                                                        uint32_t mask) {
  const __m256i m = W == 1   ? _mm256_set1_epi8(static_cast<char>(mask))
                    : W == 2 ? _mm256_set1_epi16(static_cast<short>(mask))
                             : _mm256_set1_epi32(static_cast<int>(mask));
  const uint64_t bytes = n * W;
  uint64_t b = 0;
  // 128 bytes per test; on a hit, rescan those 128 bytes for the exact code.
  for (; b + 128 <= bytes; b += 128) {
    const __m256i any =
        _mm256_or_si256(_mm256_or_si256(MatchVec<W>(p + b, m), MatchVec<W>(p + b + 32, m)),
                        _mm256_or_si256(MatchVec<W>(p + b + 64, m), MatchVec<W>(p + b + 96, m)));
    if (!_mm256_testz_si256(any, any)) break;
  }
  for (; b + 32 <= bytes; b += 32) {
    const uint32_t bits = static_cast<uint32_t>(_mm256_movemask_epi8(MatchVec<W>(p + b, m)));
    if (bits != 0) return (b + __builtin_ctz(bits)) / W;
  }
  return FirstMatchPortable<W>(p, b / W, n, mask);
}
#endif

template <int W>
uint64_t FirstMatch(const uint8_t* p, uint64_t n, uint32_t mask) {
#if defined(__x86_64__)
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  if (has_avx2) return FirstMatchAvx2<W>(p, n, mask);
#endif
  return FirstMatchPortable<W>(p, 0, n, mask);
}

// The first NaN/Inf code of a format, or `count` when there is none
// (E2M1 has no such codes).
uint64_t FirstNonFiniteCode(Format format, const uint8_t* codes, uint64_t count) {
  switch (format) {
    case Format::kE4M3:
      return FirstMatch<1>(codes, count, 0x7F);
    case Format::kE5M2:
      return FirstMatch<1>(codes, count, 0x7C);
    case Format::kBf16:
      return FirstMatch<2>(codes, count, 0x7F80);
    case Format::kF32:
      return FirstMatch<4>(codes, count, scalar::kInfBits);
    case Format::kNvfp4:
      return count;
  }
  return count;
}

// Checks that no scale or code of a well-sized payload is NaN/Inf/negative.
absl::Status CheckContents(const EncodedView& v, const EncodedLayout& layout) {
  const CodecSpec& spec = v.spec;
  auto bad_fp32 = [](float s) { return !(s >= 0.0f) || !std::isfinite(s); };
  switch (spec.scaling) {
    case Scaling::kNone:
      break;
    case Scaling::kPerTensor:
    case Scaling::kPerBlockFp32:
      for (uint64_t i = 0; i < layout.scale_bytes / 4; ++i) {
        if (bad_fp32(Load<float>(v.scales + 4 * i))) {
          return absl::InvalidArgumentError(absl::StrCat("scale ", i, " is negative, NaN or Inf"));
        }
      }
      break;
    case Scaling::kPerBlockE8M0:
      if (const uint64_t i = FirstMatch<1>(v.scales, layout.num_blocks, 0xFF);
          i != layout.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("E8M0 scale ", i, " is NaN (0xFF)"));
      }
      break;
    case Scaling::kNvfp4: {
      for (uint64_t i = 0; i < layout.num_blocks; ++i) {
        if (v.scales[i] >= 0x7F) {
          return absl::InvalidArgumentError(
              absl::StrCat("NVFP4 block scale ", i, " is negative or NaN"));
        }
      }
      const float g = Load<float>(v.scales + layout.num_blocks);
      if (bad_fp32(g) || g == 0.0f) {
        return absl::InvalidArgumentError("NVFP4 tensor scale is not a positive finite number");
      }
      break;
    }
  }
  const uint64_t count =
      spec.format == Format::kF32 || spec.format == Format::kBf16 ? layout.num_elements
                                                                  : layout.code_bytes;
  if (const uint64_t i = FirstNonFiniteCode(spec.format, v.codes, count); i != count) {
    return absl::InvalidArgumentError(absl::StrCat("code ", i, " is NaN or Inf"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> PayloadSizeFor(const CodecSpec& spec, absl::Span<const uint64_t> shape) {
  absl::StatusOr<RowsCols> rc = ShapeRowsCols(shape);
  if (!rc.ok()) return rc.status();
  absl::StatusOr<EncodedLayout> layout = ComputeLayout(spec, rc->rows, rc->cols);
  if (!layout.ok()) return layout.status();
  return kPayloadFixedHeaderBytes + 8 * shape.size() + layout->scale_bytes +
         Pad8(layout->scale_bytes) + layout->code_bytes;
}

absl::StatusOr<uint64_t> PayloadSize(const EncodedView& view, absl::Span<const uint64_t> shape) {
  if (absl::Status s = CheckShape(view, shape); !s.ok()) return s;
  return PayloadSizeFor(view.spec, shape);
}

absl::StatusOr<MutableEncodedView> StartPayload(const CodecSpec& spec,
                                                absl::Span<const uint64_t> shape,
                                                absl::Span<uint8_t> out) {
  absl::StatusOr<uint64_t> size = PayloadSizeFor(spec, shape);
  if (!size.ok()) return size.status();
  if (out.size() != *size) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload buffer has ", out.size(), " bytes, the payload needs ", *size));
  }
  const RowsCols rc = *ShapeRowsCols(shape);
  const EncodedLayout layout = *ComputeLayout(spec, rc.rows, rc.cols);
  uint8_t* p = out.data();
  const size_t header = kPayloadFixedHeaderBytes + 8 * shape.size();
  std::memset(p, 0, header);
  Store<uint32_t>(p + 0, kMagic);
  Store<uint16_t>(p + 4, kPayloadVersion);
  Store<uint16_t>(p + 6, static_cast<uint16_t>(header));
  p[8] = static_cast<uint8_t>(spec.format);
  p[9] = static_cast<uint8_t>(spec.scaling);
  p[10] = static_cast<uint8_t>(spec.rounding);
  p[11] = static_cast<uint8_t>(shape.size());
  Store<uint32_t>(p + 12, spec.block_size);
  Store<uint64_t>(p + 16, layout.num_elements);
  Store<uint64_t>(p + 24, layout.scale_bytes);
  Store<uint64_t>(p + 32, layout.code_bytes);
  for (size_t d = 0; d < shape.size(); ++d) Store<uint64_t>(p + 48 + 8 * d, shape[d]);
  uint8_t* scales = p + header;
  std::memset(scales + layout.scale_bytes, 0, Pad8(layout.scale_bytes));
  uint8_t* codes = scales + layout.scale_bytes + Pad8(layout.scale_bytes);
  return MutableEncodedView{spec, rc.rows, rc.cols, codes, scales};
}

void FinishPayload(absl::Span<uint8_t> out) {
  Store<uint32_t>(out.data() + kChecksumOffset, PayloadChecksum(out.data(), out.size()));
}

absl::Status SerializePayload(const EncodedView& view, absl::Span<const uint64_t> shape,
                              absl::Span<uint8_t> out) {
  if (absl::Status s = CheckShape(view, shape); !s.ok()) return s;
  absl::StatusOr<MutableEncodedView> dest = StartPayload(view.spec, shape, out);
  if (!dest.ok()) return dest.status();
  const EncodedLayout layout = *ComputeLayout(view.spec, view.rows, view.cols);
  if (layout.num_elements > 0 &&
      (view.codes == nullptr || (layout.scale_bytes > 0 && view.scales == nullptr))) {
    return absl::InvalidArgumentError("encoded tensor has a null buffer");
  }
  if (layout.scale_bytes > 0) std::memcpy(dest->scales, view.scales, layout.scale_bytes);
  if (layout.code_bytes > 0) std::memcpy(dest->codes, view.codes, layout.code_bytes);
  FinishPayload(out);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> SerializePayload(const EncodedView& view,
                                                      absl::Span<const uint64_t> shape) {
  absl::StatusOr<uint64_t> size = PayloadSize(view, shape);
  if (!size.ok()) return size.status();
  std::vector<uint8_t> out(*size);
  if (absl::Status s = SerializePayload(view, shape, absl::MakeSpan(out)); !s.ok()) return s;
  return out;
}

absl::StatusOr<ParsedPayload> ParsePayload(absl::Span<const uint8_t> bytes,
                                           const PayloadLimits& limits, ChecksumCheck checksum) {
  const uint8_t* p = bytes.data();
  const uint64_t size = bytes.size();
  if (size > limits.max_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat("payload of ", size, " bytes exceeds the limit of ", limits.max_bytes));
  }
  if (size < kPayloadFixedHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload truncated: ", size, " bytes, the header alone needs ", kPayloadFixedHeaderBytes));
  }
  if (Load<uint32_t>(p) != kMagic) {
    return absl::InvalidArgumentError("not a GIFT payload (bad magic)");
  }
  const uint16_t version = Load<uint16_t>(p + 4);
  if (version != kPayloadVersion) {
    return absl::UnimplementedError(absl::StrCat("payload format version ", version,
                                                 " is not supported (this build reads ",
                                                 kPayloadVersion, ")"));
  }
  const uint8_t ndims = p[11];
  if (ndims == 0 || ndims > kPayloadMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", ndims, " dims, must be 1 to ", kPayloadMaxDims));
  }
  const uint16_t header = Load<uint16_t>(p + 6);
  if (header != kPayloadFixedHeaderBytes + 8 * ndims) {
    return absl::InvalidArgumentError(
        absl::StrCat("header size field is ", header, ", ", ndims, " dims need ", 48 + 8 * ndims));
  }
  if (size < header) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload truncated: ", size, " bytes, the header needs ", header));
  }
  if (Load<uint32_t>(p + 44) != 0) {
    return absl::InvalidArgumentError("reserved header field is not zero");
  }
  CodecSpec spec{static_cast<Format>(p[8]), static_cast<Scaling>(p[9]), Load<uint32_t>(p + 12),
                 static_cast<Rounding>(p[10])};
  if (absl::Status s = Validate(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("payload codec spec: ", s.message()));
  }
  ParsedPayload parsed;
  parsed.shape.resize(ndims);
  for (size_t d = 0; d < ndims; ++d) parsed.shape[d] = Load<uint64_t>(p + 48 + 8 * d);
  absl::StatusOr<RowsCols> rc = ShapeRowsCols(parsed.shape);
  if (!rc.ok()) return absl::InvalidArgumentError(absl::StrCat("payload ", rc.status().message()));
  const uint64_t count = Load<uint64_t>(p + 16);
  if (rc->elements != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload shape holds ", rc->elements, " elements, the header says ", count));
  }
  absl::StatusOr<EncodedLayout> layout = ComputeLayout(spec, rc->rows, rc->cols);
  if (!layout.ok()) return layout.status();
  const uint64_t scale_bytes = Load<uint64_t>(p + 24);
  const uint64_t code_bytes = Load<uint64_t>(p + 32);
  if (scale_bytes != layout->scale_bytes || code_bytes != layout->code_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload declares ", scale_bytes, " scale bytes and ", code_bytes, " code bytes; ",
        ToString(spec), " of this shape needs ", layout->scale_bytes, " and ", layout->code_bytes));
  }
  // Sizes are bounded by the layout (no overflow past 2^62 for valid specs),
  // but compare in steps so a huge declared size cannot wrap.
  const uint64_t body = size - header;
  const uint64_t scale_area = layout->scale_bytes + Pad8(layout->scale_bytes);
  if (scale_area > body || layout->code_bytes > body - scale_area) {
    return absl::InvalidArgumentError(absl::StrCat("payload truncated: ", size,
                                                   " bytes, the header describes ",
                                                   header + scale_area + layout->code_bytes));
  }
  if (layout->code_bytes != body - scale_area) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload has ", body - scale_area - layout->code_bytes, " trailing bytes after the codes"));
  }
  if (checksum == ChecksumCheck::kVerify) {
    const uint32_t stored = Load<uint32_t>(p + kChecksumOffset);
    const uint32_t actual = PayloadChecksum(p, size);
    if (stored != actual) {
      return absl::DataLossError(
          absl::StrCat("payload checksum mismatch (stored ", stored, ", computed ", actual, ")"));
    }
  }
  for (uint64_t i = layout->scale_bytes; i < scale_area; ++i) {
    if (p[header + i] != 0) return absl::InvalidArgumentError("nonzero padding after the scales");
  }
  parsed.view = EncodedView{spec, layout->rows, layout->cols, p + header + scale_area, p + header};
  if (absl::Status s = CheckContents(parsed.view, *layout); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("payload contents: ", s.message()));
  }
  return parsed;
}

}  // namespace gift::codec
