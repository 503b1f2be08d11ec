// AVX2 inner loops of the codec. Compiled with -mavx2 and only called after
// a CPU check; results are identical to the portable loops (the same integer
// rounding, the same single FP32 multiplies and adds, the same Philox
// words), which tests/codec/element_loops_test.cc checks.
//
// Vectorized: block amax; quantization of all formats with nearest or
// stochastic rounding (Philox4x32-10 eight counters at a time); decoding of
// all formats. Runs whose scale blocks are not a multiple of 8 elements,
// and stochastic runs whose first flat index is not a multiple of 4, use the
// portable loops.
#include <immintrin.h>

#include <cstring>

#include "common/base/cpu_features.h"
#include "common/codec/element_loops.h"

namespace gift::codec::internal {
namespace {

inline __m256i Set1(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }

inline uint32_t HorizontalMaxU32(__m256i m) {
  m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0xB1));
  return static_cast<uint32_t>(_mm256_cvtsi256_si32(m));
}

inline __m256i AbsBits(const float* p) {
  return _mm256_and_si256(Set1(scalar::kAbsMask), _mm256_loadu_si256((const __m256i*)p));
}

uint32_t AmaxRun(const float* x, size_t n) {
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_epu32(m0, AbsBits(x + i));
    m1 = _mm256_max_epu32(m1, AbsBits(x + i + 8));
    m2 = _mm256_max_epu32(m2, AbsBits(x + i + 16));
    m3 = _mm256_max_epu32(m3, AbsBits(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_epu32(m0, AbsBits(x + i));
  uint32_t m =
      HorizontalMaxU32(_mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  for (; i < n; ++i) {
    const uint32_t a = scalar::FloatToBits(x[i]) & scalar::kAbsMask;
    m = a > m ? a : m;
  }
  return m;
}

void BlockAmax(const float* x, size_t n, size_t block, uint32_t* amax) {
  if (block >= n) {
    amax[0] = AmaxRun(x, n);
    return;
  }
  size_t b = 0;
  if (block % 8 == 0) {
    // Eight whole blocks at a time: their vector maxima reduced together by
    // one transposing max tree, stored as eight amaxes.
    for (; (b + 8) * block <= n; b += 8) {
      __m256i m[8];
      for (int j = 0; j < 8; ++j) {
        const float* p = x + (b + j) * block;
        m[j] = AbsBits(p);
        for (size_t i = 8; i < block; i += 8) m[j] = _mm256_max_epu32(m[j], AbsBits(p + i));
      }
      __m256i t[4], u[2];
      for (int j = 0; j < 4; ++j) {
        t[j] = _mm256_max_epu32(_mm256_unpacklo_epi32(m[2 * j], m[2 * j + 1]),
                                _mm256_unpackhi_epi32(m[2 * j], m[2 * j + 1]));
      }
      for (int j = 0; j < 2; ++j) {
        u[j] = _mm256_max_epu32(_mm256_unpacklo_epi64(t[2 * j], t[2 * j + 1]),
                                _mm256_unpackhi_epi64(t[2 * j], t[2 * j + 1]));
      }
      const __m256i all = _mm256_max_epu32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                                           _mm256_permute2x128_si256(u[0], u[1], 0x31));
      _mm256_storeu_si256((__m256i*)(amax + b), all);
    }
    for (; (b + 1) * block <= n; ++b) {
      const float* p = x + b * block;
      __m256i m = AbsBits(p);
      for (size_t i = 8; i < block; i += 8) m = _mm256_max_epu32(m, AbsBits(p + i));
      amax[b] = HorizontalMaxU32(m);
    }
  }
  for (; b * block < n; ++b) {
    const size_t len = n - b * block < block ? n - b * block : block;
    amax[b] = AmaxRun(x + b * block, len);
  }
}

// k / block, with a shift for the power-of-two block sizes every spec uses
// (an integer division per vector costs more than the vector's work).
inline size_t BlockOf(size_t k, size_t block) {
  return (block & (block - 1)) == 0 ? k >> __builtin_ctzll(block) : k / block;
}

// ---- quantization -------------------------------------------------------------

// Per-format constants of scalar::QuantizeMagnitude.
struct VecFormat {
  __m256i rebias;                // (127 - bias) << 23
  __m256i normal_shift;          // 23 - mbits
  __m256i min_normal_exp_field;  // emin + 127 - 1 (compared with >)
  __m256i sub_shift_base;        // 23 - mbits + emin + 127
  __m256i max_code;
  int sign_shift;
  // Nearest-even fast path: bits of 2^emin minus one (compared with >), and
  // 2^(23 + emin - mbits), whose FP32 spacing is the target's subnormal
  // spacing, so that bits(|y| + magic) - bits(magic) rounds |y| to a
  // subnormal code with IEEE round-to-nearest-even.
  __m256i min_normal_bits_minus_1;
  __m256 magic;
  __m256i half_minus_1;  // 2^(normal_shift - 1) - 1
};

VecFormat MakeVecFormat(const scalar::MiniFloat& f) {
  const int emin = 1 - f.bias;
  const int shift = 23 - f.mbits;
  const uint32_t min_normal_bits = static_cast<uint32_t>(emin + 127) << 23;
  const uint32_t magic_bits = static_cast<uint32_t>(23 + emin - f.mbits + 127) << 23;
  return VecFormat{Set1((127 - f.bias) << 23),
                   Set1(shift),
                   Set1(emin + 127 - 1),
                   Set1(23 - f.mbits + emin + 127),
                   Set1(f.max_code),
                   f.sign_shift,
                   Set1(min_normal_bits - 1),
                   _mm256_castsi256_ps(Set1(magic_bits)),
                   Set1((1u << (shift - 1)) - 1)};
}

// Nearest-even codes of eight scaled values for the small formats (E4M3,
// E5M2, E2M1): the same results as scalar::QuantizeMagnitude, in fewer
// operations. Normal lanes: re-biased bits rounded with the
// add-half-minus-one-plus-lsb trick; subnormal lanes: the magic-number add.
template <int kShift>
inline __m256i QuantizeRneSmall(const VecFormat& vf, __m256 y) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i u = _mm256_and_si256(bits, Set1(scalar::kAbsMask));
  const __m256i v = _mm256_sub_epi32(u, vf.rebias);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, kShift), Set1(1));
  const __m256i code_normal =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v, vf.half_minus_1), lsb), kShift);
  const __m256 t = _mm256_add_ps(_mm256_castsi256_ps(u), vf.magic);
  const __m256i code_sub = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(vf.magic));
  const __m256i normal = _mm256_cmpgt_epi32(u, vf.min_normal_bits_minus_1);
  const __m256i code =
      _mm256_min_epu32(_mm256_blendv_epi8(code_sub, code_normal, normal), vf.max_code);
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), vf.sign_shift);
  return _mm256_or_si256(code, sign);
}

// Nearest-even bf16 codes of eight scaled values: bf16 has FP32's exponent
// range, so every lane (denormals included) is the top half of its bits
// rounded with the add-0x7FFF-plus-lsb trick, then clamped to the largest
// finite code (which also covers Inf and NaN, as in QuantizeVec: a carry
// into bit 31 gives a code >= 0x8000, clamped the same way).
inline __m256i QuantizeRneBf16(const VecFormat& vf, __m256 y) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i u = _mm256_and_si256(bits, Set1(scalar::kAbsMask));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), Set1(1));
  const __m256i code =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, Set1(0x7FFF)), lsb), 16);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 16), Set1(0x8000));
  return _mm256_or_si256(_mm256_min_epu32(code, vf.max_code), sign);
}

// Codes (one per 32-bit lane) of eight scaled values y. With kStochastic,
// `random` holds each lane's random word.
template <bool kStochastic>
inline __m256i QuantizeVec(const VecFormat& vf, __m256 y, __m256i random) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i u = _mm256_and_si256(bits, Set1(scalar::kAbsMask));
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(bits, 31), vf.sign_shift);
  __m256i v, shift;
  if (vf.sign_shift == 15) {  // bf16: the same bias as FP32, one path
    v = u;
    shift = Set1(16);
  } else {
    const __m256i exp_field = _mm256_srli_epi32(u, 23);
    const __m256i normal = _mm256_cmpgt_epi32(exp_field, vf.min_normal_exp_field);
    const __m256i has_implicit = _mm256_cmpgt_epi32(exp_field, _mm256_setzero_si256());
    const __m256i mant = _mm256_or_si256(_mm256_and_si256(u, Set1(0x7FFFFF)),
                                         _mm256_and_si256(has_implicit, Set1(0x800000)));
    const __m256i exp_eff = _mm256_max_epi32(exp_field, Set1(1));
    __m256i sub_shift = _mm256_sub_epi32(vf.sub_shift_base, exp_eff);
    if (!kStochastic) {
      // Any shift >= 25 rounds a 24-bit significand to 0 already.
      sub_shift = _mm256_min_epi32(sub_shift, Set1(25));
    }
    v = _mm256_blendv_epi8(mant, _mm256_sub_epi32(u, vf.rebias), normal);
    shift = _mm256_blendv_epi8(sub_shift, vf.normal_shift, normal);
  }
  // Counts of 32 or more make srlv/sllv return 0, which is what the scalar
  // 64-bit arithmetic gives for these (v < 2^31).
  __m256i code = _mm256_srlv_epi32(v, shift);
  const __m256i rem = _mm256_sub_epi32(v, _mm256_sllv_epi32(code, shift));
  __m256i up;
  if (!kStochastic) {
    const __m256i half = _mm256_sllv_epi32(Set1(1), _mm256_sub_epi32(shift, Set1(1)));
    const __m256i odd = _mm256_and_si256(code, Set1(1));
    up = _mm256_or_si256(
        _mm256_cmpgt_epi32(rem, half),
        _mm256_and_si256(_mm256_cmpeq_epi32(rem, half), _mm256_cmpeq_epi32(odd, Set1(1))));
  } else {
    // The remainder as a 32-bit fraction of the spacing: rem << (32 - s) for
    // s <= 32, v >> (s - 32) above (the other term is 0 in each case).
    const __m256i frac = _mm256_or_si256(_mm256_sllv_epi32(rem, _mm256_sub_epi32(Set1(32), shift)),
                                         _mm256_srlv_epi32(v, _mm256_sub_epi32(shift, Set1(32))));
    const __m256i flip = Set1(0x80000000u);  // unsigned random < frac
    up = _mm256_cmpgt_epi32(_mm256_xor_si256(frac, flip), _mm256_xor_si256(random, flip));
  }
  code = _mm256_sub_epi32(code, up);  // the mask is -1 where rounding up
  code = _mm256_min_epu32(code, vf.max_code);
  return _mm256_or_si256(code, sign);
}

// Packs four vectors of 32-bit codes (each < 256) into 32 bytes, in order.
inline __m256i PackBytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packus_epi32(a, b);
  const __m256i cd = _mm256_packus_epi32(c, d);
  const __m256i abcd = _mm256_packus_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// ---- Philox4x32-10, eight counters at a time ----------------------------------------

inline void MulHiLo(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// The ten round keys of a stream, broadcast once per run.
struct RoundKeys {
  __m256i k0[10], k1[10];
  explicit RoundKeys(const scalar::PhiloxKey& key) {
    uint32_t a = key.k0, b = key.k1;
    for (int round = 0; round < 10; ++round) {
      k0[round] = Set1(a);
      k1[round] = Set1(b);
      a += 0x9E3779B9u;
      b += 0xBB67AE85u;
    }
  }
};

// Random words of the 32 elements [4 * group, 4 * group + 32), in element
// order, as four vectors of eight (the same words as scalar::RandomGroup).
inline void RandomBatch(const StochasticStream& sr, const RoundKeys& keys, uint64_t group,
                        __m256i out[4]) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i x, y;
  if (static_cast<uint32_t>(group) <= 0xFFFFFFF8u) {  // no carry into the high word
    x = _mm256_add_epi32(Set1(static_cast<uint32_t>(group)), lanes);
    y = Set1(static_cast<uint32_t>(group >> 32));
  } else {
    alignas(32) uint32_t lo[8], hi[8];
    for (int g = 0; g < 8; ++g) {
      lo[g] = static_cast<uint32_t>(group + g);
      hi[g] = static_cast<uint32_t>((group + g) >> 32);
    }
    x = _mm256_load_si256((const __m256i*)lo);
    y = _mm256_load_si256((const __m256i*)hi);
  }
  __m256i z = Set1(static_cast<uint32_t>(sr.step));
  __m256i w = Set1(static_cast<uint32_t>(sr.step >> 32));
  const __m256i m0 = Set1(0xD2511F53u), m1 = Set1(0xCD9E8D57u);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    MulHiLo(x, m0, &hi0, &lo0);
    MulHiLo(z, m1, &hi1, &lo1);
    x = _mm256_xor_si256(_mm256_xor_si256(hi1, y), keys.k0[round]);
    y = lo1;
    z = _mm256_xor_si256(_mm256_xor_si256(hi0, w), keys.k1[round]);
    w = lo0;
  }
  // Lane g holds words (x, y, z, w) of group + g; transpose to element order.
  const __m256i t0 = _mm256_unpacklo_epi32(x, y), t1 = _mm256_unpackhi_epi32(x, y);
  const __m256i t2 = _mm256_unpacklo_epi32(z, w), t3 = _mm256_unpackhi_epi32(z, w);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  out[0] = _mm256_permute2x128_si256(u0, u1, 0x20);
  out[1] = _mm256_permute2x128_si256(u2, u3, 0x20);
  out[2] = _mm256_permute2x128_si256(u0, u1, 0x31);
  out[3] = _mm256_permute2x128_si256(u2, u3, 0x31);
}

// Stores 32 codes of `format` for elements [k, k + 32).
inline void StoreCodes(Format format, const __m256i c[4], size_t k, uint8_t* codes) {
  if (format == Format::kBf16) {
    const __m256i lo = _mm256_permute4x64_epi64(_mm256_packus_epi32(c[0], c[1]), 0xD8);
    const __m256i hi = _mm256_permute4x64_epi64(_mm256_packus_epi32(c[2], c[3]), 0xD8);
    _mm256_storeu_si256((__m256i*)(codes + 2 * k), lo);
    _mm256_storeu_si256((__m256i*)(codes + 2 * k + 32), hi);
    return;
  }
  const __m256i bytes = PackBytes(c[0], c[1], c[2], c[3]);
  if (format == Format::kNvfp4) {
    // Pairs of nibbles: even element low, odd element high.
    const __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
    _mm_storeu_si128((__m128i*)(codes + k / 2), _mm256_castsi256_si128(packed));
    return;
  }
  _mm256_storeu_si256((__m256i*)(codes + k), bytes);
}

template <bool kStochastic, int kShift>
void QuantizeVectors(Format format, const float* x, size_t n, size_t block, const float* inv,
                     const StochasticStream* sr, uint64_t first, uint8_t* codes) {
  const VecFormat vf = MakeVecFormat(MiniFloatOf(format));
  constexpr bool kFast = !kStochastic && kShift != 16;  // not bf16
  const bool uniform = block >= n;
  const __m256 vinv0 = _mm256_set1_ps(inv[0]);
  __m256i random[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                       _mm256_setzero_si256()};
  const RoundKeys keys(kStochastic ? sr->key : scalar::PhiloxKey{0, 0});
  size_t k = 0;
  for (; k + 32 <= n; k += 32) {
    if (kStochastic) RandomBatch(*sr, keys, (first + k) >> 2, random);
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 s = uniform ? vinv0 : _mm256_set1_ps(inv[BlockOf(k + 8 * j, block)]);
      const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), s);
      if constexpr (!kStochastic && kShift == 16) {
        c[j] = QuantizeRneBf16(vf, y);
      } else if constexpr (kFast) {
        c[j] = QuantizeRneSmall<kShift>(vf, y);
      } else {
        c[j] = QuantizeVec<kStochastic>(vf, y, random[j]);
      }
    }
    StoreCodes(format, c, k, codes);
  }
  QuantizeRange(format, x, k, n, block, inv, sr, first, codes);
}

template <int kShift>
void QuantizeWithShift(Format format, const float* x, size_t n, size_t block, const float* inv,
                       const StochasticStream* sr, uint64_t first, uint8_t* codes) {
  if (sr != nullptr) {
    QuantizeVectors<true, kShift>(format, x, n, block, inv, sr, first, codes);
  } else {
    QuantizeVectors<false, kShift>(format, x, n, block, inv, sr, first, codes);
  }
}

void Quantize(Format format, const float* x, size_t n, size_t block, const float* inv,
              const StochasticStream* sr, uint64_t first, uint8_t* codes) {
  if ((block < n && block % 8 != 0) || (sr != nullptr && first % 4 != 0)) {
    QuantizeRange(format, x, 0, n, block, inv, sr, first, codes);
    return;
  }
  // The shift of the normal path, 23 - mbits, as a compile-time constant.
  switch (format) {
    case Format::kE4M3:
      return QuantizeWithShift<20>(format, x, n, block, inv, sr, first, codes);
    case Format::kE5M2:
      return QuantizeWithShift<21>(format, x, n, block, inv, sr, first, codes);
    case Format::kNvfp4:
      return QuantizeWithShift<22>(format, x, n, block, inv, sr, first, codes);
    case Format::kBf16:
      return QuantizeWithShift<16>(format, x, n, block, inv, sr, first, codes);
    case Format::kF32:
      return QuantizeRange(format, x, 0, n, block, inv, sr, first, codes);  // a copy
  }
}

// ---- block scales --------------------------------------------------------------------

// The same IEEE operations as scalar::ScaleFromAmax / InverseScale /
// Nvfp4BlockScaleCode / Nvfp4EffectiveScale, eight blocks at a time.
inline __m256 InverseOrZero(__m256 s) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), s);
  return _mm256_blendv_ps(r, zero, _mm256_cmp_ps(s, zero, _CMP_EQ_OQ));
}

void BlockScales(const CodecSpec& spec, const uint32_t* amax, size_t n, float tensor_scale,
                 float inv_tensor_scale, uint8_t* scales, float* inv) {
  size_t j = 0;
  if (spec.scaling == Scaling::kPerBlockFp32) {
    const __m256 fmt_max = _mm256_set1_ps(FormatMax(spec.format));
    const __m256 flt_min = _mm256_castsi256_ps(Set1(scalar::kFltMinBits));
    for (; j + 8 <= n; j += 8) {
      const __m256i a = _mm256_loadu_si256((const __m256i*)(amax + j));
      __m256 s = _mm256_div_ps(_mm256_castsi256_ps(a), fmt_max);
      // max(s, 2^-126) for nonzero amax; 0 for a zero amax.
      const __m256i tiny = _mm256_cmpgt_epi32(Set1(scalar::kFltMinBits), _mm256_castps_si256(s));
      s = _mm256_blendv_ps(s, flt_min, _mm256_castsi256_ps(tiny));
      s = _mm256_blendv_ps(s, _mm256_setzero_ps(),
                           _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_setzero_si256())));
      _mm256_storeu_ps(reinterpret_cast<float*>(scales + 4 * j), s);
      _mm256_storeu_ps(inv + j, InverseOrZero(s));
    }
  } else if (spec.scaling == Scaling::kPerBlockE8M0) {
    // k = floor(log2 amax) - floor(log2 max), plus one where amax's
    // significand exceeds max's; clamped to [-126, 126]. FP32 denormal
    // amaxes always clamp to -126, and a zero amax gets 2^0.
    const uint32_t max_bits = scalar::FloatToBits(FormatMax(spec.format));
    const __m256i max_exp = Set1(max_bits >> 23);
    const __m256i max_mant = Set1(max_bits & 0x7FFFFFu);
    for (; j + 8 <= n; j += 8) {
      const __m256i a = _mm256_loadu_si256((const __m256i*)(amax + j));
      const __m256i exp_field = _mm256_srli_epi32(a, 23);
      const __m256i bigger = _mm256_cmpgt_epi32(_mm256_and_si256(a, Set1(0x7FFFFFu)), max_mant);
      __m256i k = _mm256_sub_epi32(_mm256_sub_epi32(exp_field, max_exp), bigger);
      k = _mm256_min_epi32(_mm256_max_epi32(k, Set1(static_cast<uint32_t>(-126))), Set1(126));
      const __m256i denormal = _mm256_cmpeq_epi32(exp_field, _mm256_setzero_si256());
      k = _mm256_blendv_epi8(k, Set1(static_cast<uint32_t>(-126)), denormal);
      k = _mm256_blendv_epi8(k, _mm256_setzero_si256(),
                             _mm256_cmpeq_epi32(a, _mm256_setzero_si256()));
      const __m256i code = _mm256_add_epi32(k, Set1(127));
      _mm256_storeu_ps(
          inv + j, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(Set1(254), code), 23)));
      const __m128i c16 =
          _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
      _mm_storel_epi64((__m128i*)(scales + j), _mm_packus_epi16(c16, c16));
    }
  } else if (spec.scaling == Scaling::kNvfp4) {
    static const struct E4m3Table {
      alignas(32) float value[128];
      E4m3Table() {
        for (uint32_t c = 0; c < 128; ++c) value[c] = scalar::Dequantize(scalar::kE4M3, c);
      }
    } table;
    const VecFormat e4m3 = MakeVecFormat(scalar::kE4M3);
    const __m256 six = _mm256_set1_ps(6.0f);
    const __m256 ginv = _mm256_set1_ps(inv_tensor_scale);
    const __m256 g = _mm256_set1_ps(tensor_scale);
    for (; j + 8 <= n; j += 8) {
      const __m256 a = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i*)(amax + j)));
      const __m256 s = _mm256_mul_ps(_mm256_div_ps(a, six), ginv);
      __m256i code = QuantizeRneSmall<20>(e4m3, s);
      // Round up: one code higher where the nearest value is below s.
      const __m256 near = _mm256_i32gather_ps(table.value, code, 4);
      const __m256i below =
          _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(near, s, _CMP_LT_OQ)),
                           _mm256_cmpgt_epi32(Set1(scalar::kE4M3.max_code), code));
      code = _mm256_sub_epi32(code, below);
      const __m256 es = _mm256_mul_ps(_mm256_i32gather_ps(table.value, code, 4), g);
      _mm256_storeu_ps(inv + j, InverseOrZero(es));
      const __m128i c16 =
          _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
      _mm_storel_epi64((__m128i*)(scales + j), _mm_packus_epi16(c16, c16));
    }
  }
  BlockScalesRange(spec, amax, j, n, tensor_scale, inv_tensor_scale, scales, inv);
}

// The eight E2M1 magnitudes, built once.
struct Fp4Table {
  alignas(32) float value[8];
  Fp4Table() {
    for (uint32_t c = 0; c < 8; ++c) value[c] = scalar::Dequantize(scalar::kE2M1, c);
  }
};

// The (unscaled) values of eight E2M1 codes, one per 32-bit lane (< 16):
// the magnitude from the table by the low three bits, the sign from bit 3.
inline __m256 E2m1Values(__m256 table, __m256i codes) {
  const __m256 mag = _mm256_permutevar8x32_ps(table, codes);
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(codes, 3), 31);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(mag), sign));
}

// scalar::Nvfp4SquaredError of eight elements: E2M1 nearest codes of x * inv,
// their values times the scale, minus x, squared.
inline __m256 Nvfp4SquaredErrors(const VecFormat& e2m1, __m256 table, __m256 x, __m256 scale,
                                 __m256 inv) {
  const __m256i code = QuantizeRneSmall<22>(e2m1, _mm256_mul_ps(x, inv));
  const __m256 d = _mm256_sub_ps(_mm256_mul_ps(E2m1Values(table, code), scale), x);
  return _mm256_mul_ps(d, d);
}

// The sum of a block's sixteen squared errors (elements 0-7 in a, 8-15 in
// b) in scalar::Nvfp4FitBlockScaleCode's order: hadd(a, b) holds the pairs
// (0+1, 2+3, 8+9, 10+11 | 4+5, 6+7, 12+13, 14+15), a second hadd the quads
// (q0, q2, . , . | q1, q3, . , .), then (q0 + q1) + (q2 + q3).
inline float BlockSquaredError(__m256 a, __m256 b) {
  const __m256 pairs = _mm256_hadd_ps(a, b);
  const __m256 quads = _mm256_hadd_ps(pairs, pairs);
  const __m128 halves =
      _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));  // q0+q1, q2+q3
  return _mm_cvtss_f32(halves) + _mm_cvtss_f32(_mm_shuffle_ps(halves, halves, 1));
}

void FitNvfp4Scales(const float* x, size_t n, float tensor_scale, uint8_t* scales, float* inv) {
  static const Fp4Table fp4;
  const VecFormat e2m1 = MakeVecFormat(scalar::kE2M1);
  const __m256 table = _mm256_load_ps(fp4.value);
  size_t j = 0;
  for (; 16 * j + 16 <= n; ++j) {
    const __m256 a = _mm256_loadu_ps(x + 16 * j);
    const __m256 b = _mm256_loadu_ps(x + 16 * j + 8);
    const uint32_t c0 = scales[j];
    uint32_t best = c0;
    float best_err = 0.0f;
    for (uint32_t k = 0; k < scalar::kNvfp4FitCandidates && k < c0; ++k) {
      const uint32_t code = c0 - k;
      const float scale = scalar::Nvfp4EffectiveScale(code, tensor_scale);
      const __m256 vs = _mm256_set1_ps(scale);
      const __m256 vi = _mm256_set1_ps(scalar::InverseScale(scale));
      const float err = BlockSquaredError(Nvfp4SquaredErrors(e2m1, table, a, vs, vi),
                                          Nvfp4SquaredErrors(e2m1, table, b, vs, vi));
      if (k == 0 || err < best_err) {
        best = code;
        best_err = err;
      }
    }
    scales[j] = static_cast<uint8_t>(best);
    inv[j] = scalar::InverseScale(scalar::Nvfp4EffectiveScale(best, tensor_scale));
  }
  if (16 * j < n) FitNvfp4BlockScales(x + 16 * j, n - 16 * j, tensor_scale, scales + j, inv + j);
}

// ---- decoding --------------------------------------------------------------------

// Eight decoded (unscaled) values of elements [k, k + 8).
inline __m256 DecodeVec(Format format, const uint8_t* codes, size_t k, const float* table) {
  switch (format) {
    case Format::kBf16: {
      const __m256i c = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(codes + 2 * k)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(c, 16));
    }
    case Format::kNvfp4: {
      uint32_t word;
      std::memcpy(&word, codes + k / 2, 4);
      const __m256i nib = _mm256_and_si256(
          _mm256_srlv_epi32(Set1(word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)), Set1(0xF));
      return E2m1Values(_mm256_load_ps(table), nib);
    }
    default: {
      // Exact arithmetic decode of E4M3 / E5M2: normal codes by re-biasing
      // the exponent (integer), subnormal codes as m * 2^(emin - mbits)
      // (an exact int-to-float conversion and a power-of-two multiply, so
      // no FP32 denormal is involved), NaN/Inf codes patched in.
      const bool e4m3 = format == Format::kE4M3;
      const int mbits = e4m3 ? 3 : 2;
      const int bias = e4m3 ? 7 : 15;
      const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(codes + k)));
      const __m256i mag = _mm256_and_si256(c, Set1(0x7F));
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, Set1(0x80)), 24);
      const __m256i normal_bits =
          _mm256_add_epi32(_mm256_slli_epi32(mag, 23 - mbits), Set1((127 - bias) << 23));
      const __m256 sub = _mm256_mul_ps(
          _mm256_cvtepi32_ps(_mm256_and_si256(mag, Set1((1u << mbits) - 1))),
          _mm256_castsi256_ps(Set1(static_cast<uint32_t>(127 + 1 - bias - mbits) << 23)));
      const __m256i is_sub = _mm256_cmpgt_epi32(Set1(1u << mbits), mag);
      __m256i bits = _mm256_blendv_epi8(normal_bits, _mm256_castps_si256(sub), is_sub);
      if (e4m3) {
        bits = _mm256_blendv_epi8(bits, Set1(0x7FC00000u), _mm256_cmpeq_epi32(mag, Set1(0x7F)));
      } else {
        const __m256i special = _mm256_cmpgt_epi32(mag, Set1(0x7B));
        const __m256i inf_or_nan = _mm256_blendv_epi8(Set1(0x7FC00000u), Set1(scalar::kInfBits),
                                                      _mm256_cmpeq_epi32(mag, Set1(0x7C)));
        bits = _mm256_blendv_epi8(bits, inf_or_nan, special);
      }
      return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
    }
  }
}

// FP32 codes (unscaled): out = code bits, or out + value, eight at a time.
void DequantizeF32(const uint8_t* codes, size_t n, float* out, bool accumulate) {
  size_t k = 0;
  if (accumulate) {
    for (; k + 8 <= n; k += 8) {
      const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(codes + 4 * k));
      _mm256_storeu_ps(out + k, _mm256_add_ps(_mm256_loadu_ps(out + k), v));
    }
  }
  DequantizeRange(Format::kF32, codes, k, n, n, nullptr, out, accumulate);
}

void Dequantize(Format format, const uint8_t* codes, size_t n, size_t block, const float* scale,
                float* out, bool accumulate) {
  if (format == Format::kF32) {
    DequantizeF32(codes, n, out, accumulate);
    return;
  }
  const bool uniform = block >= n;
  if (!uniform && block % 8 != 0) {
    DequantizeRange(format, codes, 0, n, block, scale, out, accumulate);
    return;
  }
  static const Fp4Table fp4;
  const float* table = fp4.value;
  const __m256 s0 = _mm256_set1_ps(scale[0]);
  // FP8 codes through vcvtph2ps where the CPU has it (fewer operations per
  // element); the integer decode below handles the rest.
  static const bool has_f16c = CpuHasAvxF16c();
  size_t k = 0;
  if (has_f16c && (format == Format::kE4M3 || format == Format::kE5M2)) {
    k = DequantizeFp8F16c(format, codes, n, block, scale, out, accumulate);
  }
  for (; k + 8 <= n; k += 8) {
    const __m256 s = uniform ? s0 : _mm256_set1_ps(scale[BlockOf(k, block)]);
    __m256 v = _mm256_mul_ps(DecodeVec(format, codes, k, table), s);
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + k), v);
    _mm256_storeu_ps(out + k, v);
  }
  DequantizeRange(format, codes, k, n, block, scale, out, accumulate);
}

}  // namespace

const ElementLoops* Avx2Loops() {
  static const ElementLoops loops{&BlockAmax, &Quantize, &BlockScales, &FitNvfp4Scales,
                                  &Dequantize};
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported ? &loops : nullptr;
}

}  // namespace gift::codec::internal
