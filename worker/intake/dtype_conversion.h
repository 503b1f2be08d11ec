// Conversions between a client buffer's 16-bit floats (bfloat16, IEEE
// binary16) and the FP32 the push-pull engine works on: the worker widens a
// 16-bit gradient into its own FP32 staging on the way in and narrows the
// average back into the buffer on the way out.
//
// Widening is exact. Narrowing rounds to nearest, ties to even (what
// torch's .to(torch.bfloat16 / torch.float16) does); NaN stays NaN (quiet),
// infinities stay infinite, FP16 overflows to infinity and underflows
// through subnormals to zero, keeping the sign. One pass, branch-free per
// element so that the compiler vectorises it (FP16 uses F16C where the CPU
// has it).
//
// Thread safety: pure functions. `src` and `dst` must not overlap.
#ifndef GIFT_WORKER_INTAKE_DTYPE_CONVERSION_H_
#define GIFT_WORKER_INTAKE_DTYPE_CONVERSION_H_

#include <cstddef>
#include <cstdint>

namespace gift::worker {

void Bf16ToF32(const uint16_t* src, float* dst, size_t n);
void F32ToBf16(const float* src, uint16_t* dst, size_t n);
void F16ToF32(const uint16_t* src, float* dst, size_t n);
void F32ToF16(const float* src, uint16_t* dst, size_t n);

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_DTYPE_CONVERSION_H_
