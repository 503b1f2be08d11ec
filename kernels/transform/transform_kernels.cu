// The CUDA transform's custom kernel (see transform_kernels.h). Compiled with
// --fmad=false like the codec: the scaling is a product of two roundings,
// the same on the CPU reference and on the GPU, bit for bit.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/transform/transform_kernels.h"

namespace gift::kernels::internal {
namespace {

constexpr unsigned kThreads = 256;
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

}  // namespace

cudaError_t EnqueueScaleOuter(const ScaleOuterArgs& args, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) return cudaSuccess;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  int sms = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  const uint64_t max_ctas = static_cast<uint64_t>(sms > 0 ? sms : 1) * kCtasPerSm;
  const unsigned grid = static_cast<unsigned>(args.rows < max_ctas ? args.rows : max_ctas);
  const bool vec4 = args.cols % 4 == 0 && Aligned16(args.in) && Aligned16(args.out);
#if defined(GIFT_CUDA_HOST_EMULATION)
  // tests/kernels/cuda_host_emulation.h: run on host fibers instead.
  (void)stream;
  if (vec4) {
    ::gift::cuda_emulation::Launch(ScaleOuterKernel<true>, grid, kThreads, args);
  } else {
    ::gift::cuda_emulation::Launch(ScaleOuterKernel<false>, grid, kThreads, args);
  }
#else
  // clang-format off
  if (vec4) {
    ScaleOuterKernel<true><<<grid, kThreads, 0, stream>>>(args);
  } else {
    ScaleOuterKernel<false><<<grid, kThreads, 0, stream>>>(args);
  }
  // clang-format on
#endif
  return cudaGetLastError();
}

}  // namespace gift::kernels::internal
