// AVX2 inner loops of the codec. Compiled with -mavx2 and only called after
// a CPU check; results are identical to element_loops_scalar.cc (the same
// integer rounding, the same single FP32 multiplies and adds).
//
// Vectorized: amax, round-to-nearest-even quantization to E4M3/E5M2/BF16,
// and dequantization of E4M3/E5M2/BF16. Stochastic rounding and NVFP4 use the
// scalar loops.
#include <immintrin.h>

#include <cstring>

#include "common/codec/element_loops.h"

namespace gift::codec::internal {
namespace {

uint32_t AmaxBits(const float* x, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(scalar::kAbsMask));
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(abs_mask, _mm256_loadu_si256((const __m256i*)(x + i))));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(abs_mask, _mm256_loadu_si256((const __m256i*)(x + i + 8))));
    m2 = _mm256_max_epu32(m2, _mm256_and_si256(abs_mask, _mm256_loadu_si256((const __m256i*)(x + i + 16))));
    m3 = _mm256_max_epu32(m3, _mm256_and_si256(abs_mask, _mm256_loadu_si256((const __m256i*)(x + i + 24))));
  }
  for (; i + 8 <= n; i += 8) {
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(abs_mask, _mm256_loadu_si256((const __m256i*)(x + i))));
  }
  m0 = _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3));
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256((__m256i*)lanes, m0);
  uint32_t m = 0;
  for (uint32_t v : lanes) m = v > m ? v : m;
  for (; i < n; ++i) {
    const uint32_t a = scalar::FloatToBits(x[i]) & scalar::kAbsMask;
    m = a > m ? a : m;
  }
  return m;
}

// Parameters of the vector quantizer for one MiniFloat (see
// scalar::QuantizeMagnitude: the same two paths, selected per lane).
struct VecFormat {
  __m256i rebias;        // (127 - bias) << 23
  __m256i normal_shift;  // 23 - mbits
  __m256i min_normal_exp_field;  // emin + 127
  __m256i sub_shift_base;        // 23 - mbits + emin + 127 (minus the exponent field)
  __m256i max_code;
  int sign_shift;
};

VecFormat MakeVecFormat(const scalar::MiniFloat& f) {
  const int emin = 1 - f.bias;
  return VecFormat{_mm256_set1_epi32((127 - f.bias) << 23), _mm256_set1_epi32(23 - f.mbits),
                   _mm256_set1_epi32(emin + 127), _mm256_set1_epi32(23 - f.mbits + emin + 127),
                   _mm256_set1_epi32(static_cast<int>(f.max_code)), f.sign_shift};
}

// Eight FP8 codes (one per 32-bit lane) of y, rounded to nearest even.
inline __m256i QuantizeRne8(const VecFormat& vf, __m256 y) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i u = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(scalar::kAbsMask)));
  const __m256i exp_field = _mm256_srli_epi32(u, 23);
  // Lanes that are normal in the target format.
  const __m256i normal = _mm256_cmpgt_epi32(exp_field, _mm256_sub_epi32(vf.min_normal_exp_field,
                                                                         _mm256_set1_epi32(1)));
  // Normal path: re-biased bits.
  const __m256i v_norm = _mm256_sub_epi32(u, vf.rebias);
  // Subnormal path: significand with its implicit bit (FP32 denormals have
  // exponent field 0 and no implicit bit; they round to 0 either way since
  // the shift is then >= 25), shift clamped to 25 which already rounds every
  // 24-bit significand to 0.
  const __m256i has_implicit = _mm256_cmpgt_epi32(exp_field, _mm256_setzero_si256());
  const __m256i mant = _mm256_or_si256(
      _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFF)),
      _mm256_and_si256(has_implicit, _mm256_set1_epi32(0x800000)));
  const __m256i exp_eff = _mm256_max_epi32(exp_field, _mm256_set1_epi32(1));
  __m256i sub_shift = _mm256_sub_epi32(vf.sub_shift_base, exp_eff);
  sub_shift = _mm256_min_epi32(sub_shift, _mm256_set1_epi32(25));
  const __m256i v = _mm256_blendv_epi8(mant, v_norm, normal);
  const __m256i shift = _mm256_blendv_epi8(sub_shift, vf.normal_shift, normal);
  // Round to nearest even: code = v >> s; rem = v - (code << s); half = 1 << (s-1).
  __m256i code = _mm256_srlv_epi32(v, shift);
  const __m256i rem = _mm256_sub_epi32(v, _mm256_sllv_epi32(code, shift));
  const __m256i half = _mm256_sllv_epi32(_mm256_set1_epi32(1),
                                         _mm256_sub_epi32(shift, _mm256_set1_epi32(1)));
  const __m256i gt = _mm256_cmpgt_epi32(rem, half);
  const __m256i tie_odd = _mm256_and_si256(
      _mm256_cmpeq_epi32(rem, half),
      _mm256_cmpeq_epi32(_mm256_and_si256(code, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)));
  code = _mm256_sub_epi32(code, _mm256_or_si256(gt, tie_odd));  // mask is -1: +1
  code = _mm256_min_epu32(code, vf.max_code);
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), vf.sign_shift);
  return _mm256_or_si256(code, sign);
}

// Packs four vectors of 32-bit codes (each < 256) into 32 bytes in order.
inline __m256i PackBytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packus_epi32(a, b);  // per 128-bit lane: a0..3 b0..3 | a4..7 b4..7
  const __m256i cd = _mm256_packus_epi32(c, d);
  const __m256i abcd = _mm256_packus_epi16(ab, cd);
  // Lane order now: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 (dwords).
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void QuantizeBf16Rne(const float* x, size_t n, float inv, uint8_t* codes) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(scalar::kAbsMask));
  const __m256i max_code = _mm256_set1_epi32(static_cast<int>(scalar::kBf16.max_code));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i out[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i bits =
          _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * h), vinv));
      const __m256i u = _mm256_and_si256(bits, abs_mask);
      // RNE of the low 16 bits: u + 0x7FFF + ((u >> 16) & 1), then >> 16.
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      __m256i c = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
      c = _mm256_min_epu32(c, max_code);
      out[h] = _mm256_or_si256(c, _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), 15));
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out[0], out[1]), 0xD8);
    _mm256_storeu_si256((__m256i*)(codes + 2 * i), packed);
  }
  ScalarLoops().quantize(Format::kBf16, x + i, n - i, inv, nullptr, 0, codes + 2 * i);
}

void Quantize(Format format, const float* x, size_t n, float inv, const StochasticStream* sr,
              uint64_t first, uint8_t* codes) {
  if (sr != nullptr) {
    ScalarLoops().quantize(format, x, n, inv, sr, first, codes);
    return;
  }
  if (format == Format::kBf16) {
    QuantizeBf16Rne(x, n, inv, codes);
    return;
  }
  const VecFormat vf = MakeVecFormat(MiniFloatOf(format));
  const __m256 vinv = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = QuantizeRne8(vf, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    const __m256i b = QuantizeRne8(vf, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vinv));
    const __m256i c = QuantizeRne8(vf, _mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vinv));
    const __m256i d = QuantizeRne8(vf, _mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vinv));
    _mm256_storeu_si256((__m256i*)(codes + i), PackBytes(a, b, c, d));
  }
  ScalarLoops().quantize(format, x + i, n - i, inv, nullptr, 0, codes + i);
}

// Decode table of one 8-bit format, built once.
struct ByteTable {
  alignas(32) float value[256];
  explicit ByteTable(const scalar::MiniFloat& f) {
    for (uint32_t c = 0; c < 256; ++c) value[c] = scalar::Dequantize(f, c);
  }
};

void Dequantize(Format format, const uint8_t* codes, size_t n, float scale, float* out,
                bool accumulate) {
  if (format == Format::kNvfp4) {
    ScalarLoops().dequantize(format, codes, n, scale, out, accumulate);
    return;
  }
  const __m256 vs = _mm256_set1_ps(scale);
  size_t i = 0;
  if (format == Format::kBf16) {
    for (; i + 8 <= n; i += 8) {
      const __m256i c = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(codes + 2 * i)));
      __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c, 16)), vs);
      if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
      _mm256_storeu_ps(out + i, v);
    }
    ScalarLoops().dequantize(format, codes + 2 * i, n - i, scale, out + i, accumulate);
    return;
  }
  static const ByteTable e4m3(scalar::kE4M3);
  static const ByteTable e5m2(scalar::kE5M2);
  const float* table = format == Format::kE4M3 ? e4m3.value : e5m2.value;
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(codes + i)));
    __m256 v = _mm256_mul_ps(_mm256_i32gather_ps(table, c, 4), vs);
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  ScalarLoops().dequantize(format, codes + i, n - i, scale, out + i, accumulate);
}

}  // namespace

const ElementLoops* Avx2Loops() {
  static const ElementLoops loops{&AmaxBits, &Quantize, ScalarLoops().quantize_fp4,
                                  &Dequantize};
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported ? &loops : nullptr;
}

}  // namespace gift::codec::internal
