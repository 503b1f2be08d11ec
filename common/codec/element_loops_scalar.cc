// Portable inner loops of the codec; the reference the other paths match.
#include "common/codec/element_loops.h"

namespace gift::codec::internal {
namespace {

void BlockAmax(const float* x, size_t n, size_t block, uint32_t* amax) {
  for (size_t b = 0; b * block < n; ++b) {
    const size_t end = n - b * block < block ? n : (b + 1) * block;
    uint32_t m = 0;
    for (size_t i = b * block; i < end; ++i) {
      const uint32_t a = scalar::FloatToBits(x[i]) & scalar::kAbsMask;
      m = a > m ? a : m;
    }
    amax[b] = m;
  }
}

void Quantize(Format format, const float* x, size_t n, size_t block, const float* inv,
              const StochasticStream* sr, uint64_t first, uint8_t* codes) {
  QuantizeRange(format, x, 0, n, block, inv, sr, first, codes);
}

void Dequantize(Format format, const uint8_t* codes, size_t n, size_t block, const float* scale,
                float* out, bool accumulate) {
  DequantizeRange(format, codes, 0, n, block, scale, out, accumulate);
}

void BlockScales(const CodecSpec& spec, const uint32_t* amax, size_t n, float tensor_scale,
                 float inv_tensor_scale, uint8_t* scales, float* inv) {
  BlockScalesRange(spec, amax, 0, n, tensor_scale, inv_tensor_scale, scales, inv);
}

}  // namespace

const ElementLoops& ScalarLoops() {
  static const ElementLoops loops{&BlockAmax, &Quantize, &BlockScales, &FitNvfp4BlockScales,
                                  &Dequantize};
  return loops;
}

}  // namespace gift::codec::internal
