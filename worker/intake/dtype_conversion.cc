#include "worker/intake/dtype_conversion.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/base/cpu_features.h"
#include "common/codec/scalar.h"

namespace gift::worker {
namespace {

// The codec's bit casts (host and device agree on them).
using codec::scalar::BitsToFloat;
using codec::scalar::FloatToBits;

// Conversions of the training process's 16-bit tensors: IEEE semantics
// (NaN stays NaN, overflow rounds to infinity), unlike the codec's bf16
// element format, which carries finite values only.
inline uint16_t ToBf16(float f) {
  const uint32_t u = FloatToBits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

// IEEE binary16 <-> binary32 by bit arithmetic (the portable path).
inline float FromF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t rest = h & 0x7FFFu;
  // Normal and subnormal: shift into place and rescale by 2^112 (the
  // exponent bias difference), which also normalises subnormals exactly.
  const float scaled = BitsToFloat(rest << 13) * 0x1p112f;
  // Infinity / NaN: all-ones exponent.
  const uint32_t special = 0x7F800000u | (rest & 0x03FFu) << 13;
  const uint32_t magnitude = rest >= 0x7C00u ? special : FloatToBits(scaled);
  return BitsToFloat(sign | magnitude);
}

inline uint16_t ToF16(float f) {
  const uint32_t u = FloatToBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t out;
  if (a > 0x7F800000u) {
    out = 0x7E00u | ((a >> 13) & 0x03FFu);  // quiet NaN, payload kept where it fits
  } else if (a >= 0x477FF000u) {
    out = 0x7C00u;  // rounds to or beyond 65520: infinity
  } else if (a < 0x38800000u) {
    // Subnormal or zero: let the FPU round by adding 0.5 (2^-1), whose
    // ulp is the FP16 subnormal step 2^-24.
    out = FloatToBits(BitsToFloat(a) + 0.5f) - 0x3F000000u;
  } else {
    const uint32_t odd = (a >> 13) & 1u;
    out = (a + 0xC8000FFFu + odd) >> 13;  // rebias (-112 << 23) and round to even
  }
  return static_cast<uint16_t>(sign | out);
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void F16ToF32F16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = FromF16(src[i]);
}

__attribute__((target("avx,f16c"))) void F32ToF16F16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = ToF16(src[i]);
}

bool HasF16c() { return CpuHasAvxF16c(); }
#endif

}  // namespace

void Bf16ToF32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BitsToFloat(static_cast<uint32_t>(src[i]) << 16);
}

void F32ToBf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = ToBf16(src[i]);
}

void F16ToF32(const uint16_t* src, float* dst, size_t n) {
#if defined(__x86_64__)
  if (HasF16c()) return F16ToF32F16c(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = FromF16(src[i]);
}

void F32ToF16(const float* src, uint16_t* dst, size_t n) {
#if defined(__x86_64__)
  if (HasF16c()) return F32ToF16F16c(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = ToF16(src[i]);
}

}  // namespace gift::worker
