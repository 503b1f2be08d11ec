// The fused kernel of forward_encode_cuda.h (interface: forward_encode_kernels.h).
// Compiled with --fmad=false like the codec: every product and sum is an
// explicit round-to-nearest intrinsic (the rank-k sum an explicit fused
// multiply-add), so the FP32-output mode and the encoding mode compute the
// same value for each element, bit for bit, and the host emulation
// (tests/kernels/cuda_host_emulation.h) computes it too.
//
// Work decomposition: a CTA (8 warps) owns a tile of 64 rows x 128 columns
// at a time (grid-stride over tiles). The rank-k update is a SIMT product
// through shared memory in chunks of 32 of the k terms: L's and R's tile
// columns are staged (coalesced: both are column-major along the tile), and
// each thread accumulates 8 rows x 4 consecutive columns (warp w: rows 8w ..
// 8w + 7, lane l: columns 4l .. 4l + 3), so a warp covers 128 consecutive
// columns of one row at a time, the widest scaling block. The epilogue then
// reads the thread's quad of G once per row, scales it, adds the
// accumulator, and either stores FP32 or takes the block amax with a
// __shfl_xor_sync max over the block's B / 4 lanes, writes the block's
// scale (its first lane) and the four codes.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/codec/scalar.h"
#include "kernels/codec/codec_device.cuh"
#include "kernels/codec/codec_kernels.h"
#include "kernels/kernel_launch.cuh"
#include "kernels/transform/forward_encode_kernels.h"

namespace gift::kernels::internal {
namespace {

namespace sc = ::gift::codec::scalar;
using namespace ::gift::kernels::internal::device;  // NOLINT: the codec's device helpers

using launch::kThreads;
constexpr int kTileRows = 64;
constexpr int kTileCols = 128;
constexpr int kRowsPerWarp = kTileRows / (kThreads / 32);
constexpr int kChunk = 32;
// 24 KiB of shared memory and 256 threads per CTA: a few CTAs per SM.
constexpr int kCtasPerSm = 4;
static_assert(kRowsPerWarp == 8 && kTileCols == 4 * 32);

template <bool kEncode, ElementFormat F, ScaleKind K, int kB>
__global__ void __launch_bounds__(kThreads) FusedForwardKernel(FusedForwardArgs a) {
  // float4 arrays: 16-byte aligned for the vector reads below.
  __shared__ float4 ls4[kChunk][kTileCols / 4];
  __shared__ float4 rs4[kChunk][kTileRows / 4];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / 32;
  const uint64_t rows = a.rows, cols = a.cols;
  const uint64_t tiles_c = (cols + kTileCols - 1) / kTileCols;
  const uint64_t tiles = tiles_c * ((rows + kTileRows - 1) / kTileRows);
  float format_max = 0.0f;
  if constexpr (kEncode) format_max = a.layout.format_max;

  // The loop bounds are uniform across the CTA (barriers and shuffles).
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const uint64_t r0 = (tile / tiles_c) * kTileRows;
    const uint64_t c0 = (tile % tiles_c) * kTileCols;
    float acc[kRowsPerWarp][4];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) acc[rr][cc] = 0.0f;
    }

    for (uint32_t t0 = 0; t0 < a.k; t0 += kChunk) {
      const uint32_t kc = a.k - t0 < kChunk ? a.k - t0 : kChunk;
      __syncthreads();  // every read of the previous chunk is done
      for (int e = threadIdx.x; e < kChunk * kTileCols; e += kThreads) {
        const uint32_t kk = e / kTileCols, jj = e % kTileCols;
        const uint64_t j = c0 + jj;
        reinterpret_cast<float*>(ls4[kk])[jj] =
            kk < kc && j < cols ? __ldg(a.left + j + static_cast<uint64_t>(t0 + kk) * cols) : 0.0f;
      }
      for (int e = threadIdx.x; e < kChunk * kTileRows; e += kThreads) {
        const uint32_t kk = e / kTileRows, ii = e % kTileRows;
        const uint64_t i = r0 + ii;
        reinterpret_cast<float*>(rs4[kk])[ii] =
            kk < kc && i < rows ? __ldg(a.right + i + static_cast<uint64_t>(t0 + kk) * rows) : 0.0f;
      }
      __syncthreads();
      for (uint32_t kk = 0; kk < kc; ++kk) {
        const float4 l = ls4[kk][lane];
        const float4 ra = rs4[kk][2 * warp];
        const float4 rb = rs4[kk][2 * warp + 1];
        const float lv[4] = {l.x, l.y, l.z, l.w};
        const float rv[kRowsPerWarp] = {ra.x, ra.y, ra.z, ra.w, rb.x, rb.y, rb.z, rb.w};
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) acc[rr][cc] = __fmaf_rn(rv[rr], lv[cc], acc[rr][cc]);
        }
      }
    }

    // Epilogue, one row of the warp at a time (a row past the end is skipped
    // by the whole warp, so the shuffles stay complete). Unrolled, so that
    // acc is indexed by constants and stays in registers (a dynamic index
    // puts the array in local memory, inner loop included).
    const uint64_t j0 = c0 + 4 * lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const uint64_t i = r0 + kRowsPerWarp * warp + rr;
      if (i >= rows) continue;
      const uint64_t e0 = i * cols + j0;
      const bool full = j0 + 4 <= cols;
      float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (full) {
        LoadQuad(a.g + e0, y);
      } else {
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) y[cc] = j0 + cc < cols ? __ldg(a.g + e0 + cc) : 0.0f;
      }
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        if (j0 + cc >= cols) continue;  // stays 0: no effect on the block amax
        float x = y[cc];
        if (a.row_scale != nullptr) x = __fmul_rn(x, a.row_scale[i]);
        if (a.col_scale != nullptr) x = __fmul_rn(x, a.col_scale[j0 + cc]);
        y[cc] = __fadd_rn(x, acc[rr][cc]);
      }

      if constexpr (!kEncode) {
        if (full) {
          StoreQuad(a.out + e0, y);
        } else {
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) {
            if (j0 + cc < cols) a.out[e0 + cc] = y[cc];
          }
        }
      } else {
        constexpr int kLanes = kB / 4;  // lanes per scaling block
        static_assert(kTileCols % kB == 0 && kLanes >= 1 && kLanes <= 32);
        uint32_t amax = 0;
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) amax = max(amax, AbsBits(y[cc]));
#pragma unroll
        for (int off = kLanes / 2; off > 0; off /= 2) {
          amax = max(amax, __shfl_xor_sync(kFullMask, amax, off));
        }
        const bool leader = lane % kLanes == 0 && j0 < cols;  // the block's first lane
        const uint64_t q = i * a.layout.blocks_per_row + j0 / kB;
        if (leader && amax >= sc::kInfBits) atomicOr(a.non_finite, 1u);
        float inv;
        if constexpr (K == ScaleKind::kPerBlockFp32) {
          const float s = sc::ScaleFromAmax(amax, format_max);
          inv = sc::InverseScale(s);
          if (leader) StoreF32(a.scales + 4 * q, s);
        } else {
          static_assert(K == ScaleKind::kPerBlockE8M0);
          const uint32_t e = sc::E8M0FromAmax(amax, format_max);
          inv = sc::E8M0Inverse(e);
          if (leader) a.scales[q] = static_cast<uint8_t>(e);
        }
        const sc::MiniFloat& f = Mini<F>();
        const sc::PhiloxKey key{a.philox_k0, a.philox_k1};
        uint32_t code[4] = {0, 0, 0, 0};
        sc::Uint4 rnd{0, 0, 0, 0};
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          if (j0 + cc >= cols) continue;
          const uint64_t e = e0 + cc;
          // Element e takes word e of RandomGroup(e / 4), as in the codec.
          if (a.stochastic && (cc == 0 || (e & 3) == 0)) rnd = sc::RandomGroup(key, a.step, e >> 2);
          code[cc] = sc::Quantize(f, __fmul_rn(y[cc], inv), a.stochastic, sc::RandomWord(rnd, e));
        }
        uint8_t* dst = a.codes + i * a.layout.row_code_bytes + j0;
        if (full) {
          StoreCodeQuad<F>(a.codes, i * a.layout.row_code_bytes + j0, code);
        } else {
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) {
            if (j0 + cc < cols) dst[cc] = static_cast<uint8_t>(code[cc]);
          }
        }
      }
    }
  }
}

template <bool kEncode, ElementFormat F, ScaleKind K, int kB>
cudaError_t LaunchFused(const FusedForwardArgs& a, unsigned grid, cudaStream_t stream) {
  launch::Launch(FusedForwardKernel<kEncode, F, K, kB>, grid, stream, a);
  return cudaGetLastError();
}

template <ElementFormat F, ScaleKind K>
cudaError_t DispatchBlock(const FusedForwardArgs& a, unsigned grid, cudaStream_t stream) {
  return a.layout.block_size == 32 ? LaunchFused<true, F, K, 32>(a, grid, stream)
                                   : LaunchFused<true, F, K, 128>(a, grid, stream);
}

template <ElementFormat F>
cudaError_t DispatchScaling(const FusedForwardArgs& a, unsigned grid, cudaStream_t stream) {
  return a.layout.scaling == ScaleKind::kPerBlockFp32
             ? DispatchBlock<F, ScaleKind::kPerBlockFp32>(a, grid, stream)
             : DispatchBlock<F, ScaleKind::kPerBlockE8M0>(a, grid, stream);
}

}  // namespace

cudaError_t EnqueueFusedForward(const FusedForwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  int max_ctas = 0;
  GIFT_CUDA_TRY(launch::MaxCtas(kCtasPerSm, &max_ctas));
  const uint64_t tiles =
      ((a.rows + kTileRows - 1) / kTileRows) * ((a.cols + kTileCols - 1) / kTileCols);
  const unsigned grid = launch::GridFor(tiles, 1, max_ctas);
  if (a.out != nullptr) {
    return LaunchFused<false, ElementFormat::kF32, ScaleKind::kNone, 128>(a, grid, stream);
  }
  return a.layout.format == ElementFormat::kE5M2
             ? DispatchScaling<ElementFormat::kE5M2>(a, grid, stream)
             : DispatchScaling<ElementFormat::kE4M3>(a, grid, stream);
}

}  // namespace gift::kernels::internal
