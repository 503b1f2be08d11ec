// The CUDA codec's encode kernels (EnqueueEncode of codec_kernels.h). The
// semantics are those of the CPU codec (common/codec/codec.h); every
// value-producing step calls the shared scalar functions of
// common/codec/scalar.h, and every float multiply / add is an explicit
// round-to-nearest intrinsic so that no FMA contraction can creep in.
//
// Work decomposition (the decode kernels, codec_decode_kernels.cu, map
// threads the same way)
//   * Unscaled and per-tensor modes ("flat"): each thread owns a quad of four
//     consecutive elements [4m, 4m + 4) of the row-major tensor, so the four
//     share one Philox call (RandomGroup(.., m)) and are loaded as one float4
//     when the pointer allows. Grid-stride loops.
//   * Per-tensor amax (per-tensor and NVFP4): a first grid-stride pass,
//     warp-shuffle max, one atomicMax on unsigned |bits| per CTA. Max of
//     |bits| is exact and order-free, and a value >= 0x7F800000 means NaN or
//     Inf, so the same word also reports non-finite input.
//   * Block-scaled modes: a "lane group" of G threads owns one scaling block.
//     When cols % 4 == 0 ("quad layout") every block starts at a multiple of 4
//     elements, so each thread takes one quad (G = B / 4: 4 lanes for NVFP4's
//     16, 8 for 32, a whole warp for 128). Otherwise each thread takes single
//     elements at stride G = min(B, 32). Block amax is a __shfl_xor_sync max
//     within the group; groups never straddle warps
//     (codec_kernel_launch.cuh: BlockGeometry).
//   * FP32 passthrough (kF32, unscaled only) runs through the flat kernels:
//     encode stores each input's bit pattern, so it matches the CPU bit for
//     bit.
//   * Non-finite input in the unscaled / block modes raises a device flag
//     next to the amax word, in the caller's check words; the host reads
//     both once the work is done (codec_cuda.cc), nothing here waits.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/codec/scalar.h"
#include "kernels/codec/codec_device.cuh"
#include "kernels/codec/codec_kernel_launch.cuh"
#include "kernels/codec/codec_kernels.h"

namespace gift::kernels::internal {
namespace {

using namespace ::gift::kernels::internal::device;  // NOLINT: the shared device helpers
using namespace ::gift::kernels::internal::launch;  // NOLINT: the shared launch helpers

// One code of a flat (unscaled / per-tensor) tensor; never E2M1.
template <ElementFormat F>
__device__ __forceinline__ void StoreCode(uint8_t* codes, uint64_t i, uint32_t c) {
  if constexpr (F == ElementFormat::kF32) {
    StoreF32(codes + 4 * i, sc::BitsToFloat(c));
  } else if constexpr (F == ElementFormat::kBf16) {
    StoreU16(codes + 2 * i, c);
  } else {
    codes[i] = static_cast<uint8_t>(c);
  }
}

// ---- per-tensor amax ----------------------------------------------------------------------

struct AmaxParams {
  const float* x;
  uint64_t n;
  uint32_t* amax;  // atomicMax target, zeroed beforehand
};

__global__ void __launch_bounds__(kThreads) AmaxKernel(AmaxParams p) {
  const float* __restrict__ x = p.x;
  const uint64_t n = p.n;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t quads = n / 4;
  uint32_t m = 0;
  if (IsAligned(x, 16)) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    uint64_t qd = tid;
    // Two independent 16-byte loads in flight per thread and iteration.
    for (; qd + stride < quads; qd += 2 * stride) {
      const float4 a = __ldg(x4 + qd);
      const float4 b = __ldg(x4 + qd + stride);
      m = max(m, max(max(AbsBits(a.x), AbsBits(a.y)), max(AbsBits(a.z), AbsBits(a.w))));
      m = max(m, max(max(AbsBits(b.x), AbsBits(b.y)), max(AbsBits(b.z), AbsBits(b.w))));
    }
    if (qd < quads) {
      const float4 a = __ldg(x4 + qd);
      m = max(m, max(max(AbsBits(a.x), AbsBits(a.y)), max(AbsBits(a.z), AbsBits(a.w))));
    }
    for (uint64_t i = 4 * quads + tid; i < n; i += stride) m = max(m, AbsBits(__ldg(x + i)));
  } else {
    for (uint64_t i = tid; i < n; i += stride) m = max(m, AbsBits(__ldg(x + i)));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_xor_sync(kFullMask, m, off));
  __shared__ uint32_t partial[kWarps];
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) m = max(m, partial[w]);
    if (m != 0) atomicMax(p.amax, m);
  }
}

// ---- unscaled and per-tensor modes ------------------------------------------------------

struct FlatEncodeParams {
  const float* x;
  uint8_t* codes;
  uint8_t* scales;
  uint64_t n;
  float format_max;
  bool stochastic;
  sc::PhiloxKey key;
  uint64_t step;
  const uint32_t* amax;  // per-tensor: the amax pass's result
  uint32_t* flag;        // unscaled: set to 1 on non-finite input
};

template <ElementFormat F, bool kPerTensor>
__global__ void __launch_bounds__(kThreads) EncodeFlatKernel(FlatEncodeParams p) {
  const sc::MiniFloat& f = Mini<F>();
  float inv = 0.0f;
  if constexpr (kPerTensor) {
    const uint32_t amax = *p.amax;
    if (amax >= sc::kInfBits) return;  // reported by the host; output undefined
    const float s = sc::ScaleFromAmax(amax, p.format_max);
    inv = sc::InverseScale(s);
    if (blockIdx.x == 0 && threadIdx.x == 0) StoreF32(p.scales, s);
  }
  const uint64_t n = p.n;
  const uint64_t quads = n / 4 + (n % 4 != 0 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  bool non_finite = false;
  for (uint64_t qd = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; qd < quads;
       qd += stride) {
    const uint64_t i0 = 4 * qd;
    const bool full = n - i0 >= 4;
    float v[4];
    if (full) {
      LoadQuad(p.x + i0, v);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = i0 + k < n ? p.x[i0 + k] : 0.0f;
    }
    // Elements 4qd .. 4qd + 3 take the four words of RandomGroup(qd).
    sc::Uint4 rnd{0, 0, 0, 0};
    if (F != ElementFormat::kF32 && p.stochastic) rnd = sc::RandomGroup(p.key, p.step, qd);
    uint32_t c[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (!kPerTensor) non_finite |= AbsBits(v[k]) >= sc::kInfBits;
      const float y = kPerTensor ? __fmul_rn(v[k], inv) : v[k];
      if constexpr (F == ElementFormat::kF32) {
        c[k] = sc::FloatToBits(y);  // exact passthrough (unscaled: y is v[k])
      } else {
        c[k] = sc::Quantize(f, y, p.stochastic, sc::RandomWord(rnd, i0 + k));
      }
    }
    if (full) {
      StoreCodeQuad<F>(p.codes, i0, c);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (i0 + k < n) StoreCode<F>(p.codes, i0 + k, c[k]);
      }
    }
  }
  if (non_finite) atomicOr(p.flag, 1u);
}

struct BlockEncodeParams {
  const float* x;
  uint8_t* codes;
  uint8_t* scales;
  uint64_t cols;
  uint64_t blocks_per_row;
  uint64_t num_blocks;
  uint64_t row_code_bytes;
  float format_max;
  bool stochastic;
  sc::PhiloxKey key;
  uint64_t step;
  bool fit_scales;       // NVFP4: least-squares block scales (BlockScaleFit)
  const uint32_t* amax;  // NVFP4: the tensor amax from the amax pass
  uint32_t* flag;        // set to 1 on non-finite input
};

// sc::Nvfp4FitBlockScaleCode over one NVFP4 block spread across the lanes
// of its group (v: this lane's elements, zeros past the block's end; c0:
// the amax code, the same in every lane). Its sums follow the scalar
// function's order: a lane's quad (or single element) first, then the
// butterfly over lanes 1, 2 (, 4, 8) apart, which adds (q0 + q1) + (q2 + q3)
// in every lane. Every lane takes every step, so the shuffles stay
// converged; a candidate below code 1 repeats c0, which never wins.
template <typename Geo>
__device__ __forceinline__ uint32_t FitNvfp4BlockScaleCode(const float* v, uint32_t c0, float g) {
  static_assert(Geo::kLanes * Geo::kPerLane == 16 && (Geo::kPerLane == 4 || Geo::kPerLane == 1));
  uint32_t best = c0;
  float best_err = 0.0f;
#pragma unroll 1
  for (uint32_t k = 0; k < sc::kNvfp4FitCandidates; ++k) {
    const uint32_t code = k < c0 ? c0 - k : c0;
    const float scale = sc::Nvfp4EffectiveScale(code, g);
    const float inv = sc::InverseScale(scale);
    float err;
    if constexpr (Geo::kPerLane == 4) {
      err = sc::Nvfp4QuadSum(
          sc::Nvfp4SquaredError(v[0], scale, inv), sc::Nvfp4SquaredError(v[1], scale, inv),
          sc::Nvfp4SquaredError(v[2], scale, inv), sc::Nvfp4SquaredError(v[3], scale, inv));
    } else {
      err = sc::Nvfp4SquaredError(v[0], scale, inv);
    }
#pragma unroll
    for (int off = 1; off < Geo::kLanes; off *= 2) {
      err = __fadd_rn(err, sc::BitsToFloat(__shfl_xor_sync(kFullMask, sc::FloatToBits(err), off)));
    }
    if (k == 0 || err < best_err) {
      best = code;
      best_err = err;
    }
  }
  return best;
}

template <ElementFormat F, ScaleKind K, int kB, bool kQuad>
__global__ void __launch_bounds__(kThreads) EncodeBlocksKernel(BlockEncodeParams p) {
  using Geo = BlockGeometry<kB, kQuad>;
  static_assert((F == ElementFormat::kE2M1) == (K == ScaleKind::kNvfp4));
  const sc::MiniFloat& f = Mini<F>();
  const int lane = threadIdx.x & 31;
  const int t = lane % Geo::kLanes;
  const int slot = (threadIdx.x / 32) * Geo::kGroupsPerWarp + lane / Geo::kLanes;

  float g = 0.0f;
  float ginv = 0.0f;
  if constexpr (K == ScaleKind::kNvfp4) {
    const uint32_t amax_t = *p.amax;
    if (amax_t >= sc::kInfBits) return;  // reported by the host; output undefined
    g = sc::Nvfp4TensorScale(amax_t);
    ginv = __fdiv_rn(1.0f, g);
    if (blockIdx.x == 0 && threadIdx.x == 0) StoreF32(p.scales + p.num_blocks, g);
  }

  // The loop bound is uniform across the CTA, so every lane of every warp
  // takes part in the shuffles; lanes of inactive groups carry zeros.
  for (uint64_t base = static_cast<uint64_t>(blockIdx.x) * Geo::kGroupsPerCta; base < p.num_blocks;
       base += static_cast<uint64_t>(gridDim.x) * Geo::kGroupsPerCta) {
    const BlockPos b = LocateBlock<kB>(base + slot, p.num_blocks, p.cols, p.blocks_per_row);
    float v[Geo::kPerLane];
    bool valid[Geo::kPerLane];
    if constexpr (kQuad) {
      // len is a multiple of 4 here: a quad is all in or all out.
      const bool in = static_cast<uint32_t>(4 * t) < b.len;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        valid[k] = in;
        v[k] = 0.0f;
      }
      if (in) LoadQuad(p.x + b.e0 + 4 * t, v);
    } else {
#pragma unroll
      for (int k = 0; k < Geo::kPerLane; ++k) {
        valid[k] = Geo::Offset(t, k) < b.len;
        v[k] = valid[k] ? __ldg(p.x + b.e0 + Geo::Offset(t, k)) : 0.0f;
      }
    }

    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < Geo::kPerLane; ++k) amax = max(amax, AbsBits(v[k]));
#pragma unroll
    for (int off = Geo::kLanes / 2; off > 0; off /= 2) {
      amax = max(amax, __shfl_xor_sync(kFullMask, amax, off));
    }
    if (amax >= sc::kInfBits && t == 0) atomicOr(p.flag, 1u);

    float inv;
    if constexpr (K == ScaleKind::kPerBlockFp32) {
      const float s = sc::ScaleFromAmax(amax, p.format_max);
      inv = sc::InverseScale(s);
      if (b.active && t == 0) StoreF32(p.scales + 4 * b.q, s);
    } else if constexpr (K == ScaleKind::kPerBlockE8M0) {
      const uint32_t e = sc::E8M0FromAmax(amax, p.format_max);
      inv = sc::E8M0Inverse(e);
      if (b.active && t == 0) p.scales[b.q] = static_cast<uint8_t>(e);
    } else {
      uint32_t c = sc::Nvfp4BlockScaleCode(amax, ginv);
      if (p.fit_scales) c = FitNvfp4BlockScaleCode<Geo>(v, c, g);
      inv = sc::InverseScale(sc::Nvfp4EffectiveScale(c, g));
      if (b.active && t == 0) p.scales[b.q] = static_cast<uint8_t>(c);
    }

    uint32_t code[Geo::kPerLane];
    if constexpr (kQuad) {
      const uint64_t i0 = b.e0 + 4 * t;
      sc::Uint4 rnd{0, 0, 0, 0};
      if (p.stochastic && valid[0]) rnd = sc::RandomGroup(p.key, p.step, i0 >> 2);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        code[k] = sc::Quantize(f, __fmul_rn(v[k], inv), p.stochastic, sc::RandomWord(rnd, i0 + k));
      }
      // Quad layout means an even number of columns, so for E2M1 the row
      // padding is empty and element i sits in byte i / 2.
      if (valid[0]) StoreCodeQuad<F>(p.codes, i0, code);
    } else {
#pragma unroll
      for (int k = 0; k < Geo::kPerLane; ++k) {
        const uint64_t i = b.e0 + Geo::Offset(t, k);
        uint32_t word = 0;
        if (p.stochastic && valid[k])
          word = sc::RandomWord(sc::RandomGroup(p.key, p.step, i >> 2), i);
        code[k] = valid[k] ? sc::Quantize(f, __fmul_rn(v[k], inv), p.stochastic, word) : 0u;
      }
      if constexpr (F == ElementFormat::kE2M1) {
        // kLanes == 16, one element per lane, and c0 is even: lane t holds
        // column c0 + t, and the even lane writes the byte it shares with
        // lane t + 1 (a zero high nibble past the end of the row).
        static_assert(Geo::kPerLane == 1 && Geo::kLanes % 2 == 0);
        const uint32_t high = __shfl_down_sync(kFullMask, code[0], 1);
        if (valid[0] && (t & 1) == 0) {
          p.codes[b.r * p.row_code_bytes + (b.c0 + t) / 2] =
              static_cast<uint8_t>(code[0] | (high << 4));
        }
      } else {
#pragma unroll
        for (int k = 0; k < Geo::kPerLane; ++k) {
          if (valid[k]) p.codes[b.e0 + Geo::Offset(t, k)] = static_cast<uint8_t>(code[k]);
        }
      }
    }
  }
}

// The kernel instances, for FlatLauncher and BlocksLauncher.
struct EncodeKernels {
  template <ElementFormat F, bool kPerTensor>
  static auto Flat() {
    return EncodeFlatKernel<F, kPerTensor>;
  }
  template <ElementFormat F, ScaleKind K, int kB, bool kQuad>
  static auto Blocks() {
    return EncodeBlocksKernel<F, K, kB, kQuad>;
  }
};

}  // namespace

cudaError_t EnqueueEncode(const EncodeArgs& a, cudaStream_t stream, uint32_t* check) {
  const KernelLayout& l = a.layout;
  const uint64_t n = l.rows * l.cols;
  GIFT_CUDA_TRY(cudaMemsetAsync(check, 0, kEncodeCheckWords * sizeof(uint32_t), stream));
  if (n == 0) return cudaSuccess;
  int max_ctas = 0;
  GIFT_CUDA_TRY(MaxCtas(&max_ctas));

  uint32_t* amax = check;
  uint32_t* flag = check + 1;
  const sc::PhiloxKey key{a.philox_k0, a.philox_k1};

  if (l.scaling == ScaleKind::kPerTensor || l.scaling == ScaleKind::kNvfp4) {
    const unsigned grid = GridFor(n / 4 + 1, 2 * kThreads, max_ctas);
    Launch(AmaxKernel, grid, stream, AmaxParams{a.x, n, amax});
    GIFT_CUDA_TRY(cudaGetLastError());
  }

  if (IsFlat(l.scaling)) {
    const FlatEncodeParams p{a.x,          a.codes, a.scales, n,    l.format_max,
                             a.stochastic, key,     a.step,   amax, flag};
    DispatchFlat(l, FlatLauncher<EncodeKernels, FlatEncodeParams>{p, max_ctas, stream});
  } else {
    const BlockEncodeParams p{a.x,
                              a.codes,
                              a.scales,
                              l.cols,
                              l.blocks_per_row,
                              l.num_blocks,
                              l.row_code_bytes,
                              l.format_max,
                              a.stochastic,
                              key,
                              a.step,
                              a.fit_scales,
                              amax,
                              flag};
    DispatchBlocks(
        l, BlocksLauncher<EncodeKernels, BlockEncodeParams>{p, l.cols % 4 == 0, max_ctas, stream});
  }
  return cudaGetLastError();
}

}  // namespace gift::kernels::internal
