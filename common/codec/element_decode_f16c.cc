// E4M3 / E5M2 decoding through the F16C conversion (vcvtph2ps), sixteen
// elements per iteration. Compiled with -mavx2 -mf16c and only called after
// a CPU check (Avx2Loops); the results are bit-identical to the integer
// decode of element_loops_avx2.cc and to the portable loops, which
// tests/codec/element_loops_test.cc checks.
//
// Why it is exact: an E4M3 byte s.eeee.mmm placed at FP16 bits
// s.0eeee.mmm0000000 is the FP16 number 2^-8 times the E4M3 value, for
// normal and subnormal codes alike (FP16 has the same subnormal step
// structure, 8 exponent units lower). vcvtph2ps is exact and gives FP32
// normal numbers (no denormal assists); the multiply by 2^8 is exact; the
// multiply by the block scale is then the single rounding of the contract
// (decode = code value times scale, rounded once). An E5M2 byte is already
// the high byte of the FP16 number of the same value. NaN codes become the
// FP16 quiet NaN 0x7E00 (with the code's sign), which converts to the FP32
// 0x7FC00000 the other decoders produce; NaN operands pass through both
// multiplies unchanged.
#include <immintrin.h>

#include "common/codec/element_loops.h"

namespace gift::codec::internal {
namespace {

inline __m256i Set1x16(uint16_t v) { return _mm256_set1_epi16(static_cast<short>(v)); }

// FP16 bits of sixteen E4M3 codes, 2^-8 times their values.
inline __m256i E4m3ToHalf(__m256i x8) {  // x8: each code << 8, one per 16-bit lane
  // sign at bit 15 (and a copy at 14, cleared), eeee.mmm at bits 13..7.
  __m256i h = _mm256_and_si256(_mm256_srai_epi16(x8, 1), Set1x16(0xBF80));
  // NaN codes (eeee.mmm all ones) give s|0x3F80; turn them into s|0x7E00.
  const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, Set1x16(0x3F80)), Set1x16(0x3F80));
  return _mm256_xor_si256(h, _mm256_and_si256(nan, Set1x16(0x3F80 ^ 0x7E00)));
}

// FP16 bits of sixteen E5M2 codes (the same values); NaN payloads made the
// canonical quiet NaN, Inf kept.
inline __m256i E5m2ToHalf(__m256i x8) {
  const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(x8, Set1x16(0x7F00)), Set1x16(0x7C00));
  const __m256i cleared = _mm256_andnot_si256(_mm256_and_si256(nan, Set1x16(0x7F00)), x8);
  return _mm256_or_si256(cleared, _mm256_and_si256(nan, Set1x16(0x7E00)));
}

template <bool kE4m3, bool kUniform, bool kAccumulate>
void DecodeLoop(const uint8_t* codes, size_t n, size_t block, const float* scale, float* out,
                size_t* done) {
  const __m256 s0 = _mm256_set1_ps(scale[0]);
  const __m256 two8 = _mm256_set1_ps(256.0f);
  const int block_shift = __builtin_ctzll(block);  // block is a power of two here
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m128i bytes = _mm_loadu_si128((const __m128i*)(codes + k));
    const __m256i x8 = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
    const __m256i h = kE4m3 ? E4m3ToHalf(x8) : E5m2ToHalf(x8);
    __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if (kE4m3) {
      lo = _mm256_mul_ps(lo, two8);
      hi = _mm256_mul_ps(hi, two8);
    }
    const __m256 slo = kUniform ? s0 : _mm256_set1_ps(scale[k >> block_shift]);
    const __m256 shi = kUniform ? s0 : _mm256_set1_ps(scale[(k + 8) >> block_shift]);
    lo = _mm256_mul_ps(lo, slo);
    hi = _mm256_mul_ps(hi, shi);
    if (kAccumulate) {
      lo = _mm256_add_ps(_mm256_loadu_ps(out + k), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(out + k + 8), hi);
    }
    _mm256_storeu_ps(out + k, lo);
    _mm256_storeu_ps(out + k + 8, hi);
  }
  *done = k;
}

template <bool kE4m3>
size_t DecodeFormat(const uint8_t* codes, size_t n, size_t block, const float* scale, float* out,
                    bool accumulate) {
  size_t done = 0;
  const bool uniform = block >= n;
  if (uniform) {
    if (accumulate) DecodeLoop<kE4m3, true, true>(codes, n, 1, scale, out, &done);
    else DecodeLoop<kE4m3, true, false>(codes, n, 1, scale, out, &done);
  } else {
    if (accumulate) DecodeLoop<kE4m3, false, true>(codes, n, block, scale, out, &done);
    else DecodeLoop<kE4m3, false, false>(codes, n, block, scale, out, &done);
  }
  return done;
}

}  // namespace

size_t DequantizeFp8F16c(Format format, const uint8_t* codes, size_t n, size_t block,
                         const float* scale, float* out, bool accumulate) {
  if (block < n && (block % 8 != 0 || (block & (block - 1)) != 0)) return 0;
  if (format == Format::kE4M3) return DecodeFormat<true>(codes, n, block, scale, out, accumulate);
  if (format == Format::kE5M2) return DecodeFormat<false>(codes, n, block, scale, out, accumulate);
  return 0;
}

}  // namespace gift::codec::internal
