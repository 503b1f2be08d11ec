// The CUDA transform's custom kernel (see transform_kernels.h). Compiled with
// --fmad=false like the codec: the scaling is a product of two roundings,
// the same on the CPU reference and on the GPU, bit for bit.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_launch.cuh"
#include "kernels/transform/transform_kernels.h"

namespace gift::kernels::internal {
namespace {

using launch::kThreads;
// Enough CTAs per SM to keep the memory system busy with a grid-stride loop.
constexpr int kCtasPerSm = 8;

// One element: (x * rs) * cs, a missing factor skipped (the same value as
// multiplying by 1).
__device__ __forceinline__ float Scaled(float x, const float* rs, const float* cs, uint64_t col) {
  if (rs != nullptr) x = __fmul_rn(x, *rs);
  if (cs != nullptr) x = __fmul_rn(x, cs[col]);
  return x;
}

// One CTA per row at a time (grid-stride over rows); the CTA's threads walk
// the row's columns, so loads and stores are coalesced along the row. With
// kVec4 (cols % 4 == 0 and 16-byte aligned buffers) each thread moves four
// floats per access, which keeps more bytes in flight per thread.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) ScaleOuterKernel(ScaleOuterArgs a) {
  for (uint64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float* rs = a.row_scale != nullptr ? a.row_scale + row : nullptr;
    const float* cs = a.col_scale;
    if (kVec4) {
      const float4* in = reinterpret_cast<const float4*>(a.in + row * a.cols);
      float4* out = reinterpret_cast<float4*>(a.out + row * a.cols);
#pragma unroll 4
      for (uint64_t c = threadIdx.x; c < a.cols / 4; c += blockDim.x) {
        float4 v = in[c];
        v.x = Scaled(v.x, rs, cs, 4 * c);
        v.y = Scaled(v.y, rs, cs, 4 * c + 1);
        v.z = Scaled(v.z, rs, cs, 4 * c + 2);
        v.w = Scaled(v.w, rs, cs, 4 * c + 3);
        out[c] = v;
      }
    } else {
      const float* in = a.in + row * a.cols;
      float* out = a.out + row * a.cols;
#pragma unroll 4
      for (uint64_t c = threadIdx.x; c < a.cols; c += blockDim.x) out[c] = Scaled(in[c], rs, cs, c);
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One thread per block of a row (grid-stride over all of them); the block
// is rotated in a local array, as the reference rotates it.
__global__ void __launch_bounds__(kThreads) RotateRowsKernel(RotateRowsArgs a) {
  const uint64_t per_row = a.cols / a.block;
  const uint64_t segments = a.rows * per_row;
  for (uint64_t seg = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; seg < segments;
       seg += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t start = (seg / per_row) * a.cols + (seg % per_row) * a.block;
    const float* sign = a.signs + (seg % per_row) * a.block;
    float* p = a.x + start;
    double x[kMaxRotateBlock];
    for (uint64_t j = 0; j < a.block; ++j) {
      x[j] = a.inverse ? __dmul_rn(double(p[j]), double(sign[j])) : double(p[j]);
    }
    for (uint64_t h = 1; h < a.block; h *= 2) {
      for (uint64_t i = 0; i < a.block; i += 2 * h) {
        for (uint64_t j = i; j < i + h; ++j) {
          const double u = x[j], v = x[j + h];
          x[j] = __dadd_rn(u, v);
          x[j + h] = __dsub_rn(u, v);
        }
      }
    }
    for (uint64_t j = 0; j < a.block; ++j) {
      const double scaled = __dmul_rn(x[j], a.norm);
      p[j] = float(a.inverse ? scaled : __dmul_rn(scaled, double(sign[j])));
    }
  }
}

}  // namespace

cudaError_t EnqueueRotateRows(const RotateRowsArgs& args, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return cudaSuccess;
  int max_ctas = 0;
  GIFT_CUDA_TRY(launch::MaxCtas(kCtasPerSm, &max_ctas));
  const unsigned grid = launch::GridFor(args.rows * (args.cols / args.block), kThreads, max_ctas);
  launch::Launch(RotateRowsKernel, grid, stream, args);
  return cudaGetLastError();
}

cudaError_t EnqueueScaleOuter(const ScaleOuterArgs& args, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return cudaSuccess;
  int max_ctas = 0;
  GIFT_CUDA_TRY(launch::MaxCtas(kCtasPerSm, &max_ctas));
  const unsigned grid = launch::GridFor(args.rows, 1, max_ctas);  // a CTA per row at a time
  const bool vec4 = args.cols % 4 == 0 && Aligned16(args.in) && Aligned16(args.out);
  if (vec4) {
    launch::Launch(ScaleOuterKernel<true>, grid, stream, args);
  } else {
    launch::Launch(ScaleOuterKernel<false>, grid, stream, args);
  }
  return cudaGetLastError();
}

}  // namespace gift::kernels::internal
