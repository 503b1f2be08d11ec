// Internal to the codec: the inner loops over a contiguous run of elements
// that share one scale. Two implementations with identical results: portable
// scalar code and AVX2 (element_loops_avx2.cc). Tests compare them.
//
// Stateless; thread-safe.
#ifndef GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_
#define GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_

#include <cstddef>
#include <cstdint>

#include "common/codec/codec_spec.h"
#include "common/codec/scalar.h"

namespace gift::codec::internal {

// Stochastic rounding stream of one tensor; null means round to nearest even.
struct StochasticStream {
  scalar::PhiloxKey key;
  uint64_t step;
};

struct ElementLoops {
  // max over i of (bits(x[i]) & 0x7FFFFFFF); >= 0x7F800000 means NaN or Inf.
  uint32_t (*amax_bits)(const float* x, size_t n);

  // Codes of x[i] * inv for the 8- and 16-bit formats (E4M3, E5M2: one byte
  // each; BF16: two bytes, little-endian). `first` is the flat index of x[0]
  // in the tensor (it selects the random stream of stochastic rounding).
  void (*quantize)(Format format, const float* x, size_t n, float inv,
                   const StochasticStream* sr, uint64_t first, uint8_t* codes);

  // NVFP4 element codes of x[i] * inv, two per byte, low nibble first; x[0]
  // lands in the low nibble of codes[0].
  void (*quantize_fp4)(const float* x, size_t n, float inv, const StochasticStream* sr,
                       uint64_t first, uint8_t* codes);

  // out[i] = value(code i) * scale, or out[i] = out[i] + value * scale when
  // accumulate. For NVFP4 codes[0]'s low nibble is element 0.
  void (*dequantize)(Format format, const uint8_t* codes, size_t n, float scale, float* out,
                     bool accumulate);
};

const ElementLoops& ScalarLoops();
// Null when the CPU has no AVX2.
const ElementLoops* Avx2Loops();

inline const scalar::MiniFloat& MiniFloatOf(Format format) {
  switch (format) {
    case Format::kE4M3: return scalar::kE4M3;
    case Format::kE5M2: return scalar::kE5M2;
    case Format::kNvfp4: return scalar::kE2M1;
    case Format::kBf16: break;
  }
  return scalar::kBf16;
}

// Random word for element `index` of a stochastic stream.
inline uint32_t RandomFor(const StochasticStream& sr, uint64_t index) {
  return scalar::RandomWord(scalar::RandomGroup(sr.key, sr.step, index >> 2), index);
}

// Runs f(index, random) for index in [first, first + n), computing each
// Philox group once.
template <typename F>
inline void ForEachRandom(const StochasticStream& sr, uint64_t first, size_t n, F&& f) {
  uint64_t group = ~uint64_t{0};
  scalar::Uint4 r{};
  for (size_t k = 0; k < n; ++k) {
    const uint64_t index = first + k;
    if ((index >> 2) != group) {
      group = index >> 2;
      r = scalar::RandomGroup(sr.key, sr.step, group);
    }
    f(k, scalar::RandomWord(r, index));
  }
}

}  // namespace gift::codec::internal

#endif  // GIFT_COMMON_CODEC_ELEMENT_LOOPS_H_
