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

// Sixteen decoded values of codes[0, 16) times (slo, shi) into out[0, 16)
// (or added to it). With kTimes256, the FP16 values are first multiplied by
// 2^8 (exact); without it the caller has folded 2^8 into the scales.
template <bool kE4m3, bool kAccumulate, bool kTimes256>
inline void Step16(const uint8_t* codes, float* out, __m256 slo, __m256 shi) {
  const __m128i bytes = _mm_loadu_si128((const __m128i*)codes);
  const __m256i x8 = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
  const __m256i h = kE4m3 ? E4m3ToHalf(x8) : E5m2ToHalf(x8);
  __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  if (kTimes256) {
    lo = _mm256_mul_ps(lo, _mm256_set1_ps(256.0f));
    hi = _mm256_mul_ps(hi, _mm256_set1_ps(256.0f));
  }
  lo = _mm256_mul_ps(lo, slo);
  hi = _mm256_mul_ps(hi, shi);
  if (kAccumulate) {
    lo = _mm256_add_ps(_mm256_loadu_ps(out), lo);
    hi = _mm256_add_ps(_mm256_loadu_ps(out + 8), hi);
  }
  _mm256_storeu_ps(out, lo);
  _mm256_storeu_ps(out + 8, hi);
}

// Decodes [k, end) (end - k a multiple of 16) with one scale s. For E4M3,
// (v * 2^-8) * (s * 2^8) is the same real product as v * s, so rounding it
// once gives the same bits, provided s * 2^8 is exact: always, unless |s| >=
// 2^120 (overflow), or s is Inf/NaN (kept on the two-multiply path, which
// is the definition).
template <bool kE4m3, bool kAccumulate>
inline void RunOneScale(const uint8_t* codes, size_t k, size_t end, float s, float* out) {
  if (s != s) {
    // A NaN scale (ParsePayload refuses them): every product is that NaN,
    // quieted, also for NaN codes, as in the portable loops. Written out
    // because which NaN a NaN * NaN multiply returns depends on the operand
    // order the compiler picks.
    const __m256 q = _mm256_castsi256_ps(_mm256_set1_epi32(
        static_cast<int>(__builtin_bit_cast(uint32_t, s) | 0x00400000u)));
    for (; k < end; k += 8) {
      _mm256_storeu_ps(out + k, kAccumulate ? _mm256_add_ps(_mm256_loadu_ps(out + k), q) : q);
    }
    return;
  }
  if (!kE4m3) {
    const __m256 vs = _mm256_set1_ps(s);
    for (; k < end; k += 16) Step16<false, kAccumulate, false>(codes + k, out + k, vs, vs);
  } else if (__builtin_fabsf(s) < 0x1p120f) {
    const __m256 vs = _mm256_set1_ps(s * 256.0f);
    for (; k < end; k += 16) Step16<true, kAccumulate, false>(codes + k, out + k, vs, vs);
  } else {
    const __m256 vs = _mm256_set1_ps(s);
    for (; k < end; k += 16) Step16<true, kAccumulate, true>(codes + k, out + k, vs, vs);
  }
}

// Elements [0, returned) decoded, a multiple of 16, walked block by block
// (blocks are powers of two of at least 16 here), one scale each.
template <bool kE4m3, bool kAccumulate>
size_t DecodeLoop(const uint8_t* codes, size_t n, size_t block, const float* scale, float* out) {
  const size_t whole = n / 16 * 16;
  if (block >= n) {
    RunOneScale<kE4m3, kAccumulate>(codes, 0, whole, scale[0], out);
    return whole;
  }
  for (size_t k = 0, b = 0; k < whole; k += block, ++b) {
    const size_t end = k + block < whole ? k + block : whole;
    RunOneScale<kE4m3, kAccumulate>(codes, k, end, scale[b], out);
  }
  return whole;
}

template <bool kE4m3>
size_t DecodeFormat(const uint8_t* codes, size_t n, size_t block, const float* scale, float* out,
                    bool accumulate) {
  return accumulate ? DecodeLoop<kE4m3, true>(codes, n, block, scale, out)
                    : DecodeLoop<kE4m3, false>(codes, n, block, scale, out);
}

}  // namespace

size_t DequantizeFp8F16c(Format format, const uint8_t* codes, size_t n, size_t block,
                         const float* scale, float* out, bool accumulate) {
  // Blocks of 8 (no spec uses them) and other sizes: the integer decode.
  if (block < n && (block < 16 || (block & (block - 1)) != 0)) return 0;
  if (format == Format::kE4M3) return DecodeFormat<true>(codes, n, block, scale, out, accumulate);
  if (format == Format::kE5M2) return DecodeFormat<false>(codes, n, block, scale, out, accumulate);
  return 0;
}

}  // namespace gift::codec::internal
