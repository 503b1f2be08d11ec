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

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_REDUCE_H_
