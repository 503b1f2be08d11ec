// The aggregator's reduction primitive: decode N encoded contributions,
// accumulate them in FP32, and re-encode the sum.
//
// The sum runs over the inputs in the order given (callers pass them in rank
// order), so the FP32 result is deterministic and the CUDA version
// (kernels/codec) matches it bit for bit.
//
// Thread safety: reentrant; see codec.h for the pool.
#ifndef GIFT_COMMON_CODEC_REDUCE_H_
#define GIFT_COMMON_CODEC_REDUCE_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"

namespace gift::codec {

// sum[i] = ((in_0[i] + in_1[i]) + ...) * post_scale, then `out` = encode(sum)
// (skipped when out.codes is null). All inputs and `out` must have the same
// rows x cols; their specs may differ. `sum` must hold rows * cols floats.
// post_scale = 1 keeps the sum exact-as-FP32 (no extra rounding); 1/N gives
// the average. With fp32 inputs (decoded by copy) and an fp32 output (a copy
// of `sum`), the result is exactly the local FP32 average
// (((g0 + g1) + g2) + ...) * post_scale.
absl::Status ReduceEncoded(absl::Span<const EncodedView> inputs, float* sum, float post_scale,
                           const MutableEncodedView& out, const RngKey& key = {},
                           const CodecOptions& options = {});

// ReduceEncoded's result, bit for bit (same rank-order sum, same rounding and
// stochastic stream), written straight into `out` without a caller-visible
// FP32 sum: each piece of a row is summed into `scratch` and encoded while it
// is in cache. Outputs whose scale needs the whole tensor's amax (per-tensor,
// NVFP4) take two passes (the first finds the amax, the second sums
// each piece again and encodes it); an FP32 output (unscaled) is summed in
// place in its codes. `scratch` holds at least ReduceScratchFloats(cols)
// floats; `out.codes` must not be null. Runs on the calling thread
// (options.pool is ignored: callers reduce different chunks in parallel).
// Errors as ReduceEncoded; on a non-finite sum the output's contents are
// unspecified.
uint64_t ReduceScratchFloats(uint64_t cols);
absl::Status ReduceEncodedBlocked(absl::Span<const EncodedView> inputs, float post_scale,
                                  const MutableEncodedView& out, absl::Span<float> scratch,
                                  const RngKey& key = {}, const CodecOptions& options = {});

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_REDUCE_H_
