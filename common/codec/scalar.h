// Scalar building blocks of the codec, shared by the CPU code and the CUDA
// kernels so that both produce the same codes and scales bit for bit.
//
// Everything here is integer arithmetic on IEEE-754 bit patterns, or single
// IEEE operations (one multiply, one divide) that every conforming host and
// device rounds identically. The project is compiled without floating-point
// contraction (-ffp-contract=off, nvcc -fmad=false) so that no multiply and
// add are fused behind our back.
//
// Header-only, stateless, thread-safe.
#ifndef GIFT_COMMON_CODEC_SCALAR_H_
#define GIFT_COMMON_CODEC_SCALAR_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GIFT_HD __host__ __device__ __forceinline__
// Constants of class type are host-only for nvcc unless marked __device__.
#define GIFT_HD_CONSTANT __device__
#else
#define GIFT_HD inline
#define GIFT_HD_CONSTANT
#endif

namespace gift::codec::scalar {

// ---- bit casts -------------------------------------------------------------

GIFT_HD uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

GIFT_HD float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfBits = 0x7F800000u;     // |x| bits >= this: Inf or NaN
constexpr uint32_t kFltMinBits = 0x00800000u;  // 2^-126

// ---- element formats ---------------------------------------------------------

// A small float format without its sign: M mantissa bits, exponent bias, and
// the largest finite magnitude code. The sign sits in the bit above.
struct MiniFloat {
  int mbits;
  int bias;
  uint32_t max_code;  // magnitude code of the largest finite value
  int sign_shift;     // position of the sign bit in the code
};

GIFT_HD_CONSTANT constexpr MiniFloat kE4M3{3, 7, 0x7Eu, 7};
GIFT_HD_CONSTANT constexpr MiniFloat kE5M2{2, 15, 0x7Bu, 7};
GIFT_HD_CONSTANT constexpr MiniFloat kE2M1{1, 1, 0x7u, 3};
GIFT_HD_CONSTANT constexpr MiniFloat kBf16{7, 127, 0x7F7Fu, 15};
// FP32 itself (the kF32 passthrough): codes are FP32 bit patterns, so
// Quantize and Dequantize are bit copies for finite values.
GIFT_HD_CONSTANT constexpr MiniFloat kF32{23, 127, 0x7F7FFFFFu, 31};

// Rounds the magnitude of v / 2^shift to an integer: to nearest even, or
// stochastically using 32 random bits (rounds up with probability
// frac * 2^32 / 2^32, exact to 2^-32).
GIFT_HD uint32_t RoundShift(uint64_t v, int shift, bool stochastic, uint32_t random) {
  if (shift >= 64) return 0;
  const uint64_t code = v >> shift;
  const uint64_t rem = v & ((uint64_t{1} << shift) - 1);
  if (!stochastic) {
    const uint64_t half = uint64_t{1} << (shift - 1);
    return static_cast<uint32_t>(code + ((rem > half || (rem == half && (code & 1))) ? 1 : 0));
  }
  const uint32_t frac32 = shift >= 32 ? static_cast<uint32_t>(rem >> (shift - 32))
                                      : static_cast<uint32_t>(rem << (32 - shift));
  return static_cast<uint32_t>(code + (random < frac32 ? 1 : 0));
}

// Quantizes a finite magnitude (FP32 bits with the sign cleared) to the
// magnitude code of format `f`, saturating at f.max_code.
GIFT_HD uint32_t QuantizeMagnitude(const MiniFloat& f, uint32_t u, bool stochastic,
                                   uint32_t random) {
  if (f.mbits == 23) return u;  // FP32 to FP32: every finite value is exact
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  const int exp_field = static_cast<int>(u >> 23);
  uint64_t v;
  int shift;
  if (exp_field - 127 >= emin) {
    // Normal in the target: re-bias the exponent; the carry of rounding runs
    // into the exponent as it should.
    v = u - (static_cast<uint32_t>(127 - f.bias) << 23);
    shift = 23 - f.mbits;
  } else {
    // Subnormal in the target: integer multiple of 2^(emin - mbits).
    const bool fp32_normal = exp_field != 0;
    const int e = fp32_normal ? exp_field - 127 : -126;
    v = (u & 0x7FFFFFu) | (fp32_normal ? 0x800000u : 0u);
    shift = 23 - f.mbits + (emin - e);
  }
  const uint32_t code = RoundShift(v, shift, stochastic, random);
  return code > f.max_code ? f.max_code : code;
}

// Quantizes a finite value to a signed code of format `f`.
GIFT_HD uint32_t Quantize(const MiniFloat& f, float x, bool stochastic, uint32_t random) {
  const uint32_t bits = FloatToBits(x);
  const uint32_t sign = (bits >> 31) << f.sign_shift;
  return sign | QuantizeMagnitude(f, bits & kAbsMask, stochastic, random);
}

// Decodes a signed code of format `f` to its exact value. E4M3 NaN codes and
// E5M2 Inf/NaN codes decode to NaN/Inf; the payload parser rejects them.
GIFT_HD float Dequantize(const MiniFloat& f, uint32_t code) {
  const uint32_t sign = ((code >> f.sign_shift) & 1u) << 31;
  const uint32_t mag = code & ((1u << f.sign_shift) - 1u);
  const uint32_t e = mag >> f.mbits;
  const uint32_t m = mag & ((1u << f.mbits) - 1u);
  uint32_t bits;
  if (f.bias == 127) {  // bf16: the top half of the FP32 pattern; fp32: all of it
    bits = f.mbits == 23 ? mag : mag << 16;
  } else if (f.max_code == 0x7Eu && mag == 0x7Fu) {  // E4M3 NaN
    bits = 0x7FC00000u;
  } else if (f.bias == 15 && e == 31) {  // E5M2 Inf / NaN
    bits = m == 0 ? kInfBits : 0x7FC00000u;
  } else if (e == 0) {
    // m * 2^(1 - bias - mbits): exact; m < 2^mbits has a leading one that
    // becomes the implicit bit of an FP32 normal.
    if (m == 0) {
      bits = 0;
    } else {
      int lead = 0;
      while ((m >> (lead + 1)) != 0) ++lead;
      const int exponent = lead + 1 - f.bias - f.mbits;
      bits = (static_cast<uint32_t>(exponent + 127) << 23) |
             ((m & ((1u << lead) - 1u)) << (23 - lead));
    }
  } else {
    bits = ((e + 127u - static_cast<uint32_t>(f.bias)) << 23) | (m << (23 - f.mbits));
  }
  return BitsToFloat(sign | bits);
}

// True when an encoded element is not a finite number (never produced by
// the encoder; a payload holding one is corrupt).
GIFT_HD bool IsNonFiniteCode(const MiniFloat& f, uint32_t code) {
  const uint32_t mag = code & ((1u << f.sign_shift) - 1u);
  if (f.max_code == 0x7Eu) return mag == 0x7Fu;         // E4M3
  if (f.bias == 15) return (mag >> f.mbits) == 31u;     // E5M2
  if (f.bias == 127) return (mag >> f.mbits) == 0xFFu;  // bf16, fp32
  return false;                                         // E2M1
}

// ---- scales -------------------------------------------------------------------

// FP32 scale for an amax (given as |x| bits): amax / format_max, at least
// 2^-126 so that its reciprocal is finite; 0 for an all-zero group.
GIFT_HD float ScaleFromAmax(uint32_t amax_bits, float format_max) {
  if (amax_bits == 0) return 0.0f;
  const float s = BitsToFloat(amax_bits) / format_max;
  return FloatToBits(s) < kFltMinBits ? BitsToFloat(kFltMinBits) : s;
}

// The multiplier applied before quantization: 1 / scale, or 0 for scale 0.
GIFT_HD float InverseScale(float scale) { return scale == 0.0f ? 0.0f : 1.0f / scale; }

// floor(log2(x)) of a positive finite float given by its bits.
GIFT_HD int FloorLog2Bits(uint32_t u) {
  const int exp_field = static_cast<int>(u >> 23);
  if (exp_field != 0) return exp_field - 127;
  int lead = 22;
  while (((u >> lead) & 1u) == 0) --lead;
  return lead - 149;
}

// MX-style power-of-two scale: the E8M0 code (k + 127) of the smallest 2^k
// with amax <= format_max * 2^k, k clamped to [-126, 126] so that both 2^k
// and 2^-k are FP32 normals. An all-zero group gets 2^0.
GIFT_HD uint32_t E8M0FromAmax(uint32_t amax_bits, float format_max) {
  if (amax_bits == 0) return 127;
  const uint32_t max_bits = FloatToBits(format_max);
  int k = FloorLog2Bits(amax_bits) - FloorLog2Bits(max_bits);
  // Compare the significands (both normalised to 24 bits).
  uint32_t am = amax_bits >> 23 ? ((amax_bits & 0x7FFFFFu) | 0x800000u) : amax_bits;
  if ((amax_bits >> 23) == 0) {
    while ((am & 0x800000u) == 0) am <<= 1;
  }
  const uint32_t mm = (max_bits & 0x7FFFFFu) | 0x800000u;
  if (am > mm) ++k;
  if (k < -126) k = -126;
  if (k > 126) k = 126;
  return static_cast<uint32_t>(k + 127);
}

GIFT_HD float E8M0ToFloat(uint32_t code) { return BitsToFloat(code << 23); }
GIFT_HD float E8M0Inverse(uint32_t code) { return BitsToFloat((254u - code) << 23); }

// NVFP4: tensor scale g = amax / (6 * 448), at least 2^-117 so that every
// nonzero block scale (E4M3, >= 2^-9) times g is an FP32 normal.
constexpr float kNvfp4TensorDivisor = 6.0f * 448.0f;
constexpr uint32_t kNvfp4MinTensorScaleBits = 0x05000000u;  // 2^-117

GIFT_HD float Nvfp4TensorScale(uint32_t amax_bits) {
  const float g = BitsToFloat(amax_bits) / kNvfp4TensorDivisor;
  return FloatToBits(g) < kNvfp4MinTensorScaleBits ? BitsToFloat(kNvfp4MinTensorScaleBits) : g;
}

// E4M3 block-scale code for a block amax: s = (amax / 6) * (1 / g), rounded
// UP to the next E4M3 value, so that no element of the block saturates and
// no nonzero block gets a zero scale (round-to-nearest would flush blocks
// below 2^-10 * 6g to zero and clip elements when s falls in E4M3's coarse
// subnormal range).
GIFT_HD uint32_t Nvfp4BlockScaleCode(uint32_t block_amax_bits, float inv_tensor_scale) {
  const float s = (BitsToFloat(block_amax_bits) / 6.0f) * inv_tensor_scale;
  uint32_t code = QuantizeMagnitude(kE4M3, FloatToBits(s), false, 0);
  if (code < kE4M3.max_code && Dequantize(kE4M3, code) < s) ++code;
  return code;
}

// The factor a block's E2M1 codes are multiplied by on decode.
GIFT_HD float Nvfp4EffectiveScale(uint32_t block_code, float tensor_scale) {
  return Dequantize(kE4M3, block_code) * tensor_scale;
}

// NVFP4 with fitted block scales (BlockScaleFit::kLeastSquares): the
// encoder tries the amax code c0 of Nvfp4BlockScaleCode and the
// kNvfp4FitCandidates - 1 codes below it (never code 0), and keeps the one
// whose nearest-rounded block has the least squared error, the larger code
// on a tie. A smaller scale clips the block's largest elements to +-6 but
// resolves the small ones better. Every implementation sums a block's 16
// squared errors in one order: within each quad of four consecutive
// elements (a + b) + (c + d), then the quads (q0 + q1) + (q2 + q3); elements
// past a short block's end count as 0. With no contraction into FMAs
// (CMakeLists.txt) the choice is then the same on every host and device.
constexpr uint32_t kNvfp4FitCandidates = 4;

// The squared error of element x encoded as E2M1 with the block's effective
// scale `scale` (inverse `inv`), rounding to nearest.
GIFT_HD float Nvfp4SquaredError(float x, float scale, float inv) {
  const float d = Dequantize(kE2M1, Quantize(kE2M1, x * inv, false, 0)) * scale - x;
  return d * d;
}

GIFT_HD float Nvfp4QuadSum(float a, float b, float c, float d) { return (a + b) + (c + d); }

// The fitted E4M3 block-scale code of the `len` (<= 16) elements x of one
// block whose amax code is c0 (see above); c0 itself for an all-zero block.
GIFT_HD uint32_t Nvfp4FitBlockScaleCode(const float* x, uint32_t len, uint32_t c0,
                                        float tensor_scale) {
  uint32_t best = c0;
  float best_err = 0.0f;
  for (uint32_t k = 0; k < kNvfp4FitCandidates && k < c0; ++k) {
    const uint32_t code = c0 - k;
    const float scale = Nvfp4EffectiveScale(code, tensor_scale);
    const float inv = InverseScale(scale);
    float quad[4];
    for (uint32_t q = 0; q < 4; ++q) {
      float e[4];
      for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t i = 4 * q + j;
        e[j] = i < len ? Nvfp4SquaredError(x[i], scale, inv) : 0.0f;
      }
      quad[q] = Nvfp4QuadSum(e[0], e[1], e[2], e[3]);
    }
    const float err = Nvfp4QuadSum(quad[0], quad[1], quad[2], quad[3]);
    if (k == 0 || err < best_err) {
      best = code;
      best_err = err;
    }
  }
  return best;
}

// ---- counter-based random numbers (Philox4x32-10) ------------------------------

struct Uint4 {
  uint32_t x, y, z, w;
};

GIFT_HD void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

GIFT_HD Uint4 Philox4x32(Uint4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(0xD2511F53u, c.x, &hi0, &lo0);
    MulHiLo(0xCD9E8D57u, c.z, &hi1, &lo1);
    c = Uint4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The philox key for (tensor, rank); the step goes into the counter.
struct PhiloxKey {
  uint32_t k0, k1;
};

GIFT_HD PhiloxKey MakePhiloxKey(uint64_t tensor, uint32_t rank) {
  return PhiloxKey{
      static_cast<uint32_t>(tensor) ^ static_cast<uint32_t>(tensor >> 32) * 0x85EBCA6Bu, rank};
}

// Four random words for elements [4 * group, 4 * group + 4) of a tensor at
// `step`. Element i uses word (i & 3) of group (i >> 2).
GIFT_HD Uint4 RandomGroup(PhiloxKey key, uint64_t step, uint64_t group) {
  return Philox4x32(Uint4{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                          static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
                    key.k0, key.k1);
}

GIFT_HD uint32_t RandomWord(const Uint4& r, uint64_t index) {
  switch (index & 3) {
    case 0:
      return r.x;
    case 1:
      return r.y;
    case 2:
      return r.z;
    default:
      return r.w;
  }
}

}  // namespace gift::codec::scalar

#endif  // GIFT_COMMON_CODEC_SCALAR_H_
