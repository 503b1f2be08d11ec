// Internal to the codec: the inner loops over a contiguous run of elements
// of one row. Scales vary per block of `block` elements (block >= n means
// one scale for the whole run). Two implementations with identical results:
// portable scalar code (element_loops_scalar.cc) and AVX2
// (element_loops_avx2.cc). Tests compare them.
//
// Stateless; thread-safe.
#ifndef GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_
#define GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/codec/codec_spec.h"
#include "common/codec/scalar.h"

namespace gift::codec::internal {

// Stochastic rounding stream of one tensor; null means round to nearest even.
struct StochasticStream {
  scalar::PhiloxKey key;
  uint64_t step;
};

struct ElementLoops {
  // amax[b] = max over x[b*block, min((b+1)*block, n)) of the |x| bits;
  // a value >= 0x7F800000 means that block holds NaN or Inf.
  void (*block_amax)(const float* x, size_t n, size_t block, uint32_t* amax);

  // Codes of x[k] * inv[k / block]: one byte per element (E4M3, E5M2), two
  // little-endian bytes (BF16), or two per byte, low nibble first (NVFP4).
  // FP32 (kF32, always unscaled) copies x's bit patterns, ignoring inv.
  // `first` is the flat index of x[0] in the tensor; it selects the random
  // words of stochastic rounding.
  void (*quantize)(Format format, const float* x, size_t n, size_t block, const float* inv,
                   const StochasticStream* sr, uint64_t first, uint8_t* codes);

  // The scales of `n` blocks of a block-scaled spec from their amaxes (all
  // finite): writes the stored scale of block j to `scales` (FP32 at
  // scales + 4j for kPerBlockFp32; one byte at scales + j for kPerBlockE8M0
  // and kNvfp4) and the multiplier applied before quantization to inv[j].
  // For kNvfp4, tensor_scale is g and inv_tensor_scale is 1 / g.
  void (*block_scales)(const CodecSpec& spec, const uint32_t* amax, size_t n, float tensor_scale,
                       float inv_tensor_scale, uint8_t* scales, float* inv);

  // NVFP4 with BlockScaleFit::kLeastSquares: replaces the amax-derived
  // block-scale codes scales[j] of the n elements x (blocks of 16 from
  // x[0]) by their least-squares fits (scalar::Nvfp4FitBlockScaleCode) and
  // inv[j] by the matching multipliers.
  void (*fit_nvfp4_scales)(const float* x, size_t n, float tensor_scale, uint8_t* scales,
                           float* inv);

  // out[k] = value(code k) * scale[k / block], or out[k] + that product
  // when `accumulate` (two FP32 roundings, never fused). FP32 (kF32, always
  // unscaled) ignores `scale`: out[k] = the code's bit pattern, or
  // out[k] + value(code k).
  void (*dequantize)(Format format, const uint8_t* codes, size_t n, size_t block,
                     const float* scale, float* out, bool accumulate);
};

const ElementLoops& ScalarLoops();
// Null when the CPU has no AVX2.
const ElementLoops* Avx2Loops();

// The F16C decode of E4M3 / E5M2 (element_decode_f16c.cc): out = value *
// scale (or out + that) for elements [0, returned count), a multiple of 16;
// 0 for other formats and for block sizes (when not the whole run) that are
// not a power of two of at least 16. Only call where the CPU has AVX2 and F16C.
size_t DequantizeFp8F16c(Format format, const uint8_t* codes, size_t n, size_t block,
                         const float* scale, float* out, bool accumulate);

inline const scalar::MiniFloat& MiniFloatOf(Format format) {
  switch (format) {
    case Format::kE4M3:
      return scalar::kE4M3;
    case Format::kE5M2:
      return scalar::kE5M2;
    case Format::kNvfp4:
      return scalar::kE2M1;
    case Format::kF32:
      return scalar::kF32;
    case Format::kBf16:
      break;
  }
  return scalar::kBf16;
}

// The portable computation of block scales (see ElementLoops::block_scales)
// for blocks [begin, end).
inline void BlockScalesRange(const CodecSpec& spec, const uint32_t* amax, size_t begin, size_t end,
                             float tensor_scale, float inv_tensor_scale, uint8_t* scales,
                             float* inv) {
  const float fmt_max = FormatMax(spec.format);
  for (size_t j = begin; j < end; ++j) {
    switch (spec.scaling) {
      case Scaling::kPerBlockFp32: {
        const float s = scalar::ScaleFromAmax(amax[j], fmt_max);
        std::memcpy(scales + 4 * j, &s, 4);
        inv[j] = scalar::InverseScale(s);
        break;
      }
      case Scaling::kPerBlockE8M0: {
        const uint32_t e = scalar::E8M0FromAmax(amax[j], fmt_max);
        scales[j] = static_cast<uint8_t>(e);
        inv[j] = scalar::E8M0Inverse(e);
        break;
      }
      default: {  // kNvfp4
        const uint32_t code = scalar::Nvfp4BlockScaleCode(amax[j], inv_tensor_scale);
        scales[j] = static_cast<uint8_t>(code);
        inv[j] = scalar::InverseScale(scalar::Nvfp4EffectiveScale(code, tensor_scale));
        break;
      }
    }
  }
}

// The portable ElementLoops::fit_nvfp4_scales; the vector loops use it for
// their tails.
inline void FitNvfp4BlockScales(const float* x, size_t n, float tensor_scale, uint8_t* scales,
                                float* inv) {
  for (size_t j = 0; 16 * j < n; ++j) {
    const uint32_t len = static_cast<uint32_t>(n - 16 * j < 16 ? n - 16 * j : 16);
    const uint32_t code = scalar::Nvfp4FitBlockScaleCode(x + 16 * j, len, scales[j], tensor_scale);
    scales[j] = static_cast<uint8_t>(code);
    inv[j] = scalar::InverseScale(scalar::Nvfp4EffectiveScale(code, tensor_scale));
  }
}

// The portable loops over elements [begin, end) of a run (begin even for
// NVFP4, since two elements share a byte). The vector loops use them for
// their tails.
inline void QuantizeRange(Format format, const float* x, size_t begin, size_t end, size_t block,
                          const float* inv, const StochasticStream* sr, uint64_t first,
                          uint8_t* codes) {
  if (format == Format::kF32) {
    // Exact passthrough: the bit patterns themselves (unscaled, no rounding).
    if (end > begin) std::memmove(codes + 4 * begin, x + begin, 4 * (end - begin));
    return;
  }
  const scalar::MiniFloat& f = MiniFloatOf(format);
  uint64_t group = ~uint64_t{0};
  scalar::Uint4 r{};
  for (size_t k = begin; k < end; ++k) {
    uint32_t random = 0;
    if (sr != nullptr) {
      const uint64_t index = first + k;
      if ((index >> 2) != group) {
        group = index >> 2;
        r = scalar::RandomGroup(sr->key, sr->step, group);
      }
      random = scalar::RandomWord(r, index);
    }
    const float s = inv[k / block];
    const uint32_t c = scalar::Quantize(f, x[k] * s, sr != nullptr, random);
    switch (format) {
      case Format::kBf16: {
        const uint16_t c16 = static_cast<uint16_t>(c);
        std::memcpy(codes + 2 * k, &c16, 2);
        break;
      }
      case Format::kNvfp4:
        if (k % 2 == 0) {
          codes[k / 2] = static_cast<uint8_t>(c);
        } else {
          codes[k / 2] |= static_cast<uint8_t>(c << 4);
        }
        break;
      default:
        codes[k] = static_cast<uint8_t>(c);
        break;
    }
  }
}

inline void DequantizeRange(Format format, const uint8_t* codes, size_t begin, size_t end,
                            size_t block, const float* scale, float* out, bool accumulate) {
  if (format == Format::kF32) {
    // Unscaled: a bit copy, or one FP32 addition per element.
    if (!accumulate) {
      if (end > begin) std::memmove(out + begin, codes + 4 * begin, 4 * (end - begin));
      return;
    }
    for (size_t k = begin; k < end; ++k) {
      float v;
      std::memcpy(&v, codes + 4 * k, 4);
      out[k] = out[k] + v;
    }
    return;
  }
  const scalar::MiniFloat& f = MiniFloatOf(format);
  for (size_t k = begin; k < end; ++k) {
    uint32_t c;
    switch (format) {
      case Format::kBf16: {
        uint16_t c16;
        std::memcpy(&c16, codes + 2 * k, 2);
        c = c16;
        break;
      }
      case Format::kNvfp4:
        c = (codes[k / 2] >> ((k % 2) * 4)) & 0xFu;
        break;
      default:
        c = codes[k];
        break;
    }
    const float s = scale[k / block];
    const float v = scalar::Dequantize(f, c) * s;
    out[k] = accumulate ? out[k] + v : v;
  }
}

}  // namespace gift::codec::internal

#endif  // GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_
