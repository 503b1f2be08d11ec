// The CUDA codec: the same encodings as the CPU codec (common/codec/codec.h,
// reduce.h), computed on the GPU, with the same codes and scales bit for bit.
//
// All pointers in the views and arrays are device memory (cudaMalloc). Work
// is enqueued on `stream`; each call synchronizes that stream before it
// returns, because Encode must report non-finite input as a status. Scratch
// memory is allocated per call (stream-ordered).
//
// Nothing here needs a GPU at build time; at run time every function returns
// FailedPrecondition when no CUDA device is present.
//
// Thread safety: reentrant; concurrent calls on different streams are safe.
#ifndef GIFT_KERNELS_CODEC_CODEC_CUDA_H_
#define GIFT_KERNELS_CODEC_CODEC_CUDA_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "kernels/cuda_status.h"

namespace gift::kernels {

// CudaDeviceAvailable(): kernels/cuda_status.h.

// Encodes rows x cols floats at device pointer `x` into `out` (device
// buffers). Non-finite input: InvalidArgument (the output is then undefined).
absl::Status EncodeCuda(const float* x, const codec::MutableEncodedView& out,
                        const codec::RngKey& key, cudaStream_t stream);

// Decodes `in` into `out` (rows x cols floats), or adds it to `out` when
// `accumulate` (out[i] = out[i] + value, one FP32 rounding).
absl::Status DecodeCuda(const codec::EncodedView& in, float* out, bool accumulate,
                        cudaStream_t stream);

// The reduction primitive of common/codec/reduce.h on the GPU: `sum` gets
// ((in_0 + in_1) + ...) * post_scale in input order, then `out` = encode(sum)
// unless out.codes is null. The views (host structs) point at device memory.
absl::Status ReduceCuda(absl::Span<const codec::EncodedView> inputs, float* sum, float post_scale,
                        const codec::MutableEncodedView& out, const codec::RngKey& key,
                        cudaStream_t stream);

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_CODEC_CODEC_CUDA_H_
