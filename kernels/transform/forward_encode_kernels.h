// Internal interface between the fused forward transform + encode's host code
// (forward_encode_cuda.cc: validation, absl::Status) and its kernel
// (forward_encode_kernels.cu, compiled by nvcc, which includes nothing but
// the CUDA runtime, common/codec/scalar.h and the codec's device helpers).
//
// Callers have validated every argument; these functions trust them. All
// pointers are device memory.
//
// Thread safety: reentrant; concurrent calls on different streams are safe.
#ifndef GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_KERNELS_H_
#define GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/codec/codec_kernels.h"

namespace gift::kernels::internal {

// The last two steps of the transform (TensorBasisCuda::LowRankTerms), per
// element of the row-major rows x cols result, in this fixed order:
//   acc = 0; for t in 0..k-1: acc = fma(right[i + t rows], left[j + t cols], acc)
//   x   = g[i cols + j]; x = x * row_scale[i]; x = x * col_scale[j]   (each rounded)
//   y   = x + acc
// and then either y is stored as FP32 (`out` non-null) or encoded, one
// block-scaled block at a time, exactly as codec Encode encodes y (`codes`
// non-null). A null scale vector stands for ones.
struct FusedForwardArgs {
  const float* g = nullptr;
  uint64_t rows = 0;
  uint64_t cols = 0;
  const float* row_scale = nullptr;  // rows values, or null
  const float* col_scale = nullptr;  // cols values, or null
  const float* left = nullptr;       // cols x k, column-major
  const float* right = nullptr;      // rows x k, column-major
  uint32_t k = 0;

  float* out = nullptr;  // FP32 result, or null to encode

  // Encoding (out == null): layout.format kE4M3 / kE5M2, layout.scaling
  // kPerBlockFp32 / kPerBlockE8M0, layout.block_size 32 or 128.
  KernelLayout layout;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  bool stochastic = false;
  uint32_t philox_k0 = 0;
  uint32_t philox_k1 = 0;
  uint64_t step = 0;
  uint32_t* non_finite = nullptr;  // one zeroed word; set to 1 on a NaN/Inf block
};

// Enqueues the kernel on `stream` and returns without waiting; the first
// CUDA error of the launch, if any.
cudaError_t EnqueueFusedForward(const FusedForwardArgs& args, cudaStream_t stream);

}  // namespace gift::kernels::internal

#endif  // GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_KERNELS_H_
