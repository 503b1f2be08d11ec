// The CUDA codec's decode kernels (EnqueueDecode of codec_kernels.h). The
// semantics are those of the CPU codec (common/codec/codec.h): codes are
// dequantized with the shared scalar functions of common/codec/scalar.h
// (through a shared-memory table of every code for the 8- and 4-bit
// formats), and every float multiply / add is an explicit round-to-nearest
// intrinsic so that no FMA contraction can creep in.
//
// Threads map onto elements as in the encode kernels (codec_encode_kernels.cu):
// a quad of four consecutive elements per thread in the flat modes, a lane
// group per scaling block in the block-scaled ones. FP32 passthrough (kF32)
// loads each code's bit pattern back (a copy, or one __fadd_rn when
// accumulating), so it matches the CPU bit for bit.
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

// ---- formats -------------------------------------------------------------------

// Entries of the shared-memory decode table (0: decoded arithmetically).
template <ElementFormat F>
constexpr int kTableSize = F == ElementFormat::kBf16 || F == ElementFormat::kF32
                               ? 0
                               : (F == ElementFormat::kE2M1 ? 16 : 256);

// Fills `table` with scalar::Dequantize of every code; the caller syncs.
template <ElementFormat F>
__device__ __forceinline__ void FillTable(float* table) {
  if constexpr (kTableSize < F >> 0) {
    for (int code = threadIdx.x; code < kTableSize<F>; code += kThreads) {
      table[code] = sc::Dequantize(Mini<F>(), static_cast<uint32_t>(code));
    }
  }
}

template <ElementFormat F>
__device__ __forceinline__ float DecodeCode(const float* table, uint32_t code) {
  if constexpr (F == ElementFormat::kF32) {
    return sc::BitsToFloat(code);  // the bit pattern itself
  } else if constexpr (kTableSize<F> == 0) {
    return sc::Dequantize(Mini<F>(), code);
  } else {
    return table[code];
  }
}

template <ElementFormat F>
__device__ __forceinline__ void LoadCodeQuad(const uint8_t* codes, uint64_t i0, uint32_t c[4]) {
  if constexpr (F == ElementFormat::kF32) {
    const uint8_t* p = codes + 4 * i0;
    if (IsAligned(p, 16)) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
      c[0] = w.x;
      c[1] = w.y;
      c[2] = w.z;
      c[3] = w.w;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) c[k] = sc::FloatToBits(LoadF32(p + 4 * k));
    }
  } else if constexpr (F == ElementFormat::kBf16) {
    const uint8_t* p = codes + 2 * i0;
    if (IsAligned(p, 8)) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(p));
      c[0] = w.x & 0xFFFFu;
      c[1] = w.x >> 16;
      c[2] = w.y & 0xFFFFu;
      c[3] = w.y >> 16;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) c[k] = LoadU16(p + 2 * k);
    }
  } else if constexpr (F == ElementFormat::kE2M1) {
    const uint32_t w = LoadU16(codes + i0 / 2);
#pragma unroll
    for (int k = 0; k < 4; ++k) c[k] = (w >> (4 * k)) & 0xFu;
  } else {
    const uint8_t* p = codes + i0;
    if (IsAligned(p, 4)) {
      const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(p));
#pragma unroll
      for (int k = 0; k < 4; ++k) c[k] = (w >> (8 * k)) & 0xFFu;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) c[k] = p[k];
    }
  }
}

template <ElementFormat F>
__device__ __forceinline__ uint32_t LoadCode(const uint8_t* codes, uint64_t i) {
  if constexpr (F == ElementFormat::kF32) {
    return sc::FloatToBits(LoadF32(codes + 4 * i));
  } else if constexpr (F == ElementFormat::kBf16) {
    return LoadU16(codes + 2 * i);
  } else {
    return codes[i];
  }
}

// The decoded value of one element after the optional accumulate and
// post-scale, each its own FP32 rounding.
struct Finish {
  bool accumulate;
  bool apply_post_scale;
  float post_scale;

  __device__ __forceinline__ float operator()(float old, float value) const {
    float r = accumulate ? __fadd_rn(old, value) : value;
    if (apply_post_scale) r = __fmul_rn(r, post_scale);
    return r;
  }
};

struct FlatDecodeParams {
  const uint8_t* codes;
  const uint8_t* scales;
  float* out;
  uint64_t n;
  Finish finish;
};

template <ElementFormat F, bool kPerTensor>
__global__ void __launch_bounds__(kThreads) DecodeFlatKernel(FlatDecodeParams p) {
  __shared__ float table[kTableSize<F> > 0 ? kTableSize<F> : 1];
  FillTable<F>(table);
  __syncthreads();
  const float s = kPerTensor ? LoadF32(p.scales) : 1.0f;
  const uint64_t n = p.n;
  const uint64_t quads = n / 4 + (n % 4 != 0 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t qd = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; qd < quads;
       qd += stride) {
    const uint64_t i0 = 4 * qd;
    const bool full = n - i0 >= 4;
    uint32_t c[4] = {0, 0, 0, 0};
    float old[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (full) {
      LoadCodeQuad<F>(p.codes, i0, c);
      if (p.finish.accumulate) LoadQuadRw(p.out + i0, old);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (i0 + k < n) {
          c[k] = LoadCode<F>(p.codes, i0 + k);
          if (p.finish.accumulate) old[k] = p.out[i0 + k];
        }
      }
    }
    float r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float value = DecodeCode<F>(table, c[k]);
      if constexpr (kPerTensor) value = __fmul_rn(value, s);
      r[k] = p.finish(old[k], value);
    }
    if (full) {
      StoreQuad(p.out + i0, r);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (i0 + k < n) p.out[i0 + k] = r[k];
      }
    }
  }
}

struct BlockDecodeParams {
  const uint8_t* codes;
  const uint8_t* scales;
  float* out;
  uint64_t cols;
  uint64_t blocks_per_row;
  uint64_t num_blocks;
  uint64_t row_code_bytes;
  Finish finish;
};

template <ElementFormat F, ScaleKind K, int kB, bool kQuad>
__global__ void __launch_bounds__(kThreads) DecodeBlocksKernel(BlockDecodeParams p) {
  using Geo = BlockGeometry<kB, kQuad>;
  __shared__ float table[kTableSize<F> > 0 ? kTableSize<F> : 1];
  FillTable<F>(table);
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int t = lane % Geo::kLanes;
  const int slot = (threadIdx.x / 32) * Geo::kGroupsPerWarp + lane / Geo::kLanes;
  float g = 0.0f;
  if constexpr (K == ScaleKind::kNvfp4) g = LoadF32(p.scales + p.num_blocks);

  for (uint64_t base = static_cast<uint64_t>(blockIdx.x) * Geo::kGroupsPerCta; base < p.num_blocks;
       base += static_cast<uint64_t>(gridDim.x) * Geo::kGroupsPerCta) {
    const BlockPos b = LocateBlock<kB>(base + slot, p.num_blocks, p.cols, p.blocks_per_row);
    if (!b.active) continue;  // no shuffles below
    float scale;
    if constexpr (K == ScaleKind::kPerBlockFp32) {
      scale = LoadF32(p.scales + 4 * b.q);
    } else if constexpr (K == ScaleKind::kPerBlockE8M0) {
      scale = sc::E8M0ToFloat(p.scales[b.q]);
    } else {
      scale = sc::Nvfp4EffectiveScale(p.scales[b.q], g);
    }
    if constexpr (kQuad) {
      if (static_cast<uint32_t>(4 * t) >= b.len) continue;
      const uint64_t i0 = b.e0 + 4 * t;
      uint32_t c[4];
      LoadCodeQuad<F>(p.codes, i0, c);
      float old[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (p.finish.accumulate) LoadQuadRw(p.out + i0, old);
      float r[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        r[k] = p.finish(old[k], __fmul_rn(DecodeCode<F>(table, c[k]), scale));
      StoreQuad(p.out + i0, r);
    } else {
#pragma unroll
      for (int k = 0; k < Geo::kPerLane; ++k) {
        const uint32_t off = Geo::Offset(t, k);
        if (off >= b.len) continue;
        const uint64_t i = b.e0 + off;
        uint32_t c;
        if constexpr (F == ElementFormat::kE2M1) {
          // Column c0 + off; c0 is even, so off's parity picks the nibble.
          const uint8_t byte = p.codes[b.r * p.row_code_bytes + (b.c0 + off) / 2];
          c = (off & 1) ? (byte >> 4) : (byte & 0xFu);
        } else {
          c = p.codes[i];
        }
        const float old = p.finish.accumulate ? p.out[i] : 0.0f;
        p.out[i] = p.finish(old, __fmul_rn(DecodeCode<F>(table, c), scale));
      }
    }
  }
}

// The kernel instances, for FlatLauncher and BlocksLauncher.
struct DecodeKernels {
  template <ElementFormat F, bool kPerTensor>
  static auto Flat() {
    return DecodeFlatKernel<F, kPerTensor>;
  }
  template <ElementFormat F, ScaleKind K, int kB, bool kQuad>
  static auto Blocks() {
    return DecodeBlocksKernel<F, K, kB, kQuad>;
  }
};

}  // namespace

cudaError_t EnqueueDecode(const DecodeArgs& a, cudaStream_t stream) {
  const KernelLayout& l = a.layout;
  const uint64_t n = l.rows * l.cols;
  int max_ctas = 0;
  GIFT_CUDA_TRY(MaxCtas(&max_ctas));
  const Finish finish{a.accumulate, a.apply_post_scale, a.post_scale};
  if (IsFlat(l.scaling)) {
    const FlatDecodeParams p{a.codes, a.scales, a.out, n, finish};
    DispatchFlat(l, FlatLauncher<DecodeKernels, FlatDecodeParams>{p, max_ctas, stream});
  } else {
    const BlockDecodeParams p{a.codes,      a.scales,         a.out, l.cols, l.blocks_per_row,
                              l.num_blocks, l.row_code_bytes, finish};
    DispatchBlocks(
        l, BlocksLauncher<DecodeKernels, BlockDecodeParams>{p, l.cols % 4 == 0, max_ctas, stream});
  }
  return cudaGetLastError();
}

}  // namespace gift::kernels::internal
