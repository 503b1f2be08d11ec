// SplitMix64 (Steele, Lea, Flood 2014): a tiny, fast 64-bit generator for
// reproducible test data, benchmark gradients and the Hadamard transform's
// random signs. Not for anything that must be unpredictable.
//
// Thread safety: a pure function of the caller's state.
#ifndef GIFT_COMMON_BASE_SPLIT_MIX64_H_
#define GIFT_COMMON_BASE_SPLIT_MIX64_H_

#include <cstdint>

namespace gift {

// Advances `state` and returns the next value of its sequence.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A double in [0, 1) from the next value of `state` (its top 53 bits).
inline double SplitMix64Uniform(uint64_t& state) {
  return static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace gift

#endif  // GIFT_COMMON_BASE_SPLIT_MIX64_H_
