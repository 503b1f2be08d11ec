// The CPU codec: FP32 tensors to and from low-precision encodings.
//
//   auto t = EncodedTensor::Create(spec, rows, cols);
//   GIFT_RETURN_IF_ERROR(Encode(grad, t->mutable_view(), {.tensor = id, .step = s}));
//   GIFT_RETURN_IF_ERROR(Decode(t->view(), out));
//
// Encoding semantics (the CUDA codec in kernels/codec reproduces them bit for
// bit): amax = max |x| over the scaling group, exact; an FP32 scale
// s = max(amax / format_max, 2^-126) (0 for an all-zero group); each element
// is quantized from x * (1 / s) with the spec's rounding, saturating at the
// format's max. Decoding multiplies the exact code value by the scale once.
// The FP32 passthrough (Format::kF32, unscaled) stores and returns the FP32
// bit patterns unchanged (denormals and -0 included).
//
// Inputs holding NaN or Inf are refused with InvalidArgument naming the first
// offending element; nothing is written to the output in that case.
//
// Thread safety: the functions are reentrant. With a pool they split large
// tensors across its threads; results are identical with or without one.
#ifndef GIFT_COMMON_CODEC_CODEC_H_
#define GIFT_COMMON_CODEC_CODEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"

namespace gift::codec {

struct CodecOptions {
  ThreadPool* pool = nullptr;  // not owned; null runs on the calling thread
  bool use_simd = true;        // AVX2 loops where the CPU has them
};

// Encodes rows x cols floats at `x` (host memory, row-major) into `out`.
absl::Status Encode(const float* x, const MutableEncodedView& out, const RngKey& key = {},
                    const CodecOptions& options = {});

// Decodes `in` into rows x cols floats at `out`.
absl::Status Decode(const EncodedView& in, float* out, const CodecOptions& options = {});

// acc[i] = acc[i] + decode(in)[i], each sum rounded once in FP32.
absl::Status DecodeAccumulate(const EncodedView& in, float* acc, const CodecOptions& options = {});

// The factor the code of element (row, col) is multiplied by on decode (1
// without scaling; for NVFP4 the E4M3 block scale times the tensor scale).
// NaN for a view whose spec or shape is invalid.
float EffectiveScale(const EncodedView& in, uint64_t row, uint64_t col);

// The largest error decode(in)[row, col] may have against the value x it was
// encoded from: ElementErrorBound with that element's effective scale.
double EncodedErrorBound(const EncodedView& in, uint64_t row, uint64_t col, double x);

// True when this process uses AVX2 loops for use_simd = true.
bool CpuHasAvx2();

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_CODEC_H_
