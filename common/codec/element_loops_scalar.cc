// Portable inner loops of the codec; the reference the other paths match.
#include <cstring>

#include "common/codec/element_loops.h"

namespace gift::codec::internal {
namespace {

uint32_t AmaxBits(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = scalar::FloatToBits(x[i]) & scalar::kAbsMask;
    m = a > m ? a : m;
  }
  return m;
}

void Quantize(Format format, const float* x, size_t n, float inv, const StochasticStream* sr,
              uint64_t first, uint8_t* codes) {
  const scalar::MiniFloat& f = MiniFloatOf(format);
  if (format == Format::kBf16) {
    auto put = [&](size_t k, uint32_t rnd) {
      const uint16_t c = static_cast<uint16_t>(scalar::Quantize(f, x[k] * inv, sr != nullptr, rnd));
      std::memcpy(codes + 2 * k, &c, 2);
    };
    if (sr != nullptr) {
      ForEachRandom(*sr, first, n, put);
    } else {
      for (size_t k = 0; k < n; ++k) put(k, 0);
    }
    return;
  }
  auto put = [&](size_t k, uint32_t rnd) {
    codes[k] = static_cast<uint8_t>(scalar::Quantize(f, x[k] * inv, sr != nullptr, rnd));
  };
  if (sr != nullptr) {
    ForEachRandom(*sr, first, n, put);
  } else {
    for (size_t k = 0; k < n; ++k) put(k, 0);
  }
}

void QuantizeFp4(const float* x, size_t n, float inv, const StochasticStream* sr, uint64_t first,
                 uint8_t* codes) {
  std::memset(codes, 0, n / 2 + n % 2);
  auto put = [&](size_t k, uint32_t rnd) {
    const uint32_t c = scalar::Quantize(scalar::kE2M1, x[k] * inv, sr != nullptr, rnd);
    codes[k >> 1] |= static_cast<uint8_t>(c << ((k & 1) * 4));
  };
  if (sr != nullptr) {
    ForEachRandom(*sr, first, n, put);
  } else {
    for (size_t k = 0; k < n; ++k) put(k, 0);
  }
}

void Dequantize(Format format, const uint8_t* codes, size_t n, float scale, float* out,
                bool accumulate) {
  const scalar::MiniFloat& f = MiniFloatOf(format);
  for (size_t k = 0; k < n; ++k) {
    uint32_t c;
    if (format == Format::kBf16) {
      uint16_t c16;
      std::memcpy(&c16, codes + 2 * k, 2);
      c = c16;
    } else if (format == Format::kNvfp4) {
      c = (codes[k >> 1] >> ((k & 1) * 4)) & 0xFu;
    } else {
      c = codes[k];
    }
    const float v = scalar::Dequantize(f, c) * scale;
    out[k] = accumulate ? out[k] + v : v;
  }
}

}  // namespace

const ElementLoops& ScalarLoops() {
  static const ElementLoops loops{&AmaxBits, &Quantize, &QuantizeFp4, &Dequantize};
  return loops;
}

}  // namespace gift::codec::internal
