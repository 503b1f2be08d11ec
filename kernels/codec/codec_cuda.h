// The CUDA codec: the same encodings as the CPU codec (common/codec/codec.h,
// reduce.h), computed on the GPU, with the same codes and scales bit for bit.
//
// All pointers in the views and arrays are device memory (cudaMalloc). Work
// is enqueued on `stream`. EncodeCuda, DecodeCuda and ReduceCuda synchronize
// that stream before they return (Encode reports non-finite input as a
// status; their scratch is allocated per call, stream-ordered).
// EncodeCudaAsync and DecodeCudaAsync only enqueue: the non-finite check of
// an asynchronous encode lands in an EncodeCheck the caller owns, which it
// reads once the work is done (EncodeCheckStatus); EncodeCuda is
// EncodeCudaAsync, a copy of its check and a synchronization.
//
// Nothing here needs a GPU at build time; at run time every function returns
// FailedPrecondition when no CUDA device is present.
//
// Thread safety: reentrant; concurrent calls on different streams are safe.
#ifndef GIFT_KERNELS_CODEC_CODEC_CUDA_H_
#define GIFT_KERNELS_CODEC_CODEC_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

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

// The non-finite check of one asynchronous encode: written on the device by
// EncodeCudaAsync's kernels (the tensor's amax as |bits|, and a flag), read
// on the host from a copy the caller makes after the encode.
struct EncodeCheck {
  uint32_t words[2] = {0, 0};
};

// EncodeCuda without the wait: validates (the same errors as EncodeCuda,
// returned now), then enqueues on `stream` the zeroing of `*check` (device
// memory, caller-owned, written only by this encode's work) and the
// encoding, and returns. Once that work completed (an event recorded after
// it, or a later copy on the stream), a host copy of `*check` gives the
// result through EncodeCheckStatus. CUDA errors of the enqueueing: Internal.
absl::Status EncodeCudaAsync(const float* x, const codec::MutableEncodedView& out,
                             const codec::RngKey& key, cudaStream_t stream, EncodeCheck* check);

// OK, or EncodeCuda's InvalidArgument ("the input holds NaN or Inf") for a
// rows x cols tensor whose completed encode left `check` (a host copy).
absl::Status EncodeCheckStatus(const EncodeCheck& check, uint64_t rows, uint64_t cols);

// Decodes `in` into `out` (rows x cols floats), or adds it to `out` when
// `accumulate` (out[i] = out[i] + value, one FP32 rounding).
absl::Status DecodeCuda(const codec::EncodedView& in, float* out, bool accumulate,
                        cudaStream_t stream);

// DecodeCuda without the wait: validates (the same errors, returned now),
// enqueues the decoding on `stream` and returns; `in` is read and `out`
// written when the stream gets there.
absl::Status DecodeCudaAsync(const codec::EncodedView& in, float* out, bool accumulate,
                             cudaStream_t stream);

// The reduction primitive of common/codec/reduce.h on the GPU: `sum` gets
// ((in_0 + in_1) + ...) * post_scale in input order, then `out` = encode(sum)
// unless out.codes is null. The views (host structs) point at device memory.
absl::Status ReduceCuda(absl::Span<const codec::EncodedView> inputs, float* sum, float post_scale,
                        const codec::MutableEncodedView& out, const codec::RngKey& key,
                        cudaStream_t stream);

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_CODEC_CODEC_CUDA_H_
