// Shared helpers of the codec tests: spec lists and data generators.
#ifndef GIFT_TESTS_CODEC_TEST_UTIL_H_
#define GIFT_TESTS_CODEC_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/codec/codec_spec.h"

namespace gift::codec::testing {

// Every supported spec, by name ("fp32", the exact passthrough, included:
// every test over this list must hold for a bit copy too).
inline std::vector<std::string> AllSpecNames() {
  std::vector<std::string> names;
  for (const char* fmt : {"e4m3", "e5m2"}) {
    for (const char* scaling : {"none", "tensor", "block32", "block128", "mx32", "mx128"}) {
      for (const char* rounding : {"rne", "sr"}) {
        names.push_back(std::string(fmt) + "/" + scaling + "/" + rounding);
      }
    }
  }
  for (const char* s :
       {"nvfp4", "nvfp4/sr", "nvfp4/mse", "nvfp4/mse/sr", "bf16", "bf16/sr", "fp32"}) {
    names.emplace_back(s);
  }
  return names;
}

inline CodecSpec Spec(const std::string& name) { return ParseCodecSpec(name).value(); }

// Gradient-like data: Gaussian values whose magnitude varies by row and
// block over several decades, with zeros, negative zeros and FP32
// denormals sprinkled in.
inline std::vector<float> GradientLike(uint64_t rows, uint64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decades(-6.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    const float row_scale = std::pow(10.0f, decades(rng));
    for (uint64_t c = 0; c < cols; ++c) {
      const float block_scale = (c / 16) % 3 == 0 ? 1.0f : 0.01f;
      x[r * cols + c] = normal(rng) * row_scale * block_scale;
    }
  }
  for (size_t i = 0; i < x.size(); i += 97) x[i] = 0.0f;
  for (size_t i = 13; i < x.size(); i += 101) x[i] = -0.0f;
  for (size_t i = 29; i < x.size(); i += 211) x[i] = 1e-40f * (i % 2 ? 1.0f : -1.0f);
  return x;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace gift::codec::testing

#endif  // GIFT_TESTS_CODEC_TEST_UTIL_H_
