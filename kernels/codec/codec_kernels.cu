// Kernels of the CUDA codec. The semantics are those of the CPU codec
// (common/codec/codec.h); every value-producing step calls the shared scalar
// functions of common/codec/scalar.h, and every float multiply / add is an explicit
// round-to-nearest intrinsic so that no FMA contraction can creep in.
//
// Work decomposition
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
//     within the group; groups never straddle warps.
//   * FP32 passthrough (kF32, unscaled only) runs through the flat kernels:
//     encode stores each input's bit pattern, decode loads it back (a copy,
//     or one __fadd_rn when accumulating), so it matches the CPU bit for bit.
//   * Non-finite input in the unscaled / block modes raises a device flag;
//     it is read back once at the end together with the amax word.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/codec/scalar.h"
#include "kernels/codec/codec_device.cuh"
#include "kernels/codec/codec_kernels.h"

namespace gift::kernels::internal {
namespace {

namespace sc = ::gift::codec::scalar;
using namespace ::gift::kernels::internal::device;  // NOLINT: the shared device helpers

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Grid-stride kernels launch at most this many CTAs per SM (8 are resident
// at 256 threads; the rest queue up as further waves).
constexpr int kCtasPerSm = 16;

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

// ---- small arithmetic helpers ----------------------------------------------------------

// a / b and a % b, in 32 bits when both fit (the common case).
__device__ __forceinline__ void DivMod(uint64_t a, uint64_t b, uint64_t* quot, uint64_t* rem) {
  if (((a | b) >> 32) == 0) {
    const uint32_t q = static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
    *quot = q;
    *rem = a - static_cast<uint64_t>(q) * b;
  } else {
    *quot = a / b;
    *rem = a - *quot * b;
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

// ---- block-scaled modes -------------------------------------------------------------------

// How the threads of a CTA map onto scaling blocks of kB elements.
template <int kB, bool kQuad>
struct BlockGeometry {
  // Threads per scaling block, and elements per thread.
  static constexpr int kLanes = kQuad ? kB / 4 : (kB < 32 ? kB : 32);
  static constexpr int kPerLane = kQuad ? 4 : kB / kLanes;
  static constexpr int kGroupsPerWarp = 32 / kLanes;
  static constexpr int kGroupsPerCta = kGroupsPerWarp * kWarps;
  static_assert(kLanes >= 1 && kLanes <= 32 && 32 % kLanes == 0);
  static_assert(kLanes * kPerLane == kB);

  // Position inside the block of element k of lane t.
  __device__ static constexpr uint32_t Offset(int t, int k) {
    return kQuad ? static_cast<uint32_t>(4 * t + k) : static_cast<uint32_t>(t + k * kLanes);
  }
};

// The scaling block handled by a lane group in one iteration.
struct BlockPos {
  bool active;   // q < num_blocks
  uint64_t q;    // block index r * blocks_per_row + j
  uint64_t r;    // row
  uint64_t c0;   // first column, j * kB
  uint64_t e0;   // flat index of the first element, r * cols + c0
  uint32_t len;  // elements in the block (kB, or fewer for a row's last)
};

template <int kB>
__device__ __forceinline__ BlockPos LocateBlock(uint64_t q, uint64_t num_blocks, uint64_t cols,
                                                uint64_t blocks_per_row) {
  BlockPos b{q < num_blocks, q, 0, 0, 0, 0};
  if (b.active) {
    uint64_t j;
    DivMod(q, blocks_per_row, &b.r, &j);
    b.c0 = j * kB;
    const uint64_t left = cols - b.c0;
    b.len = left < kB ? static_cast<uint32_t>(left) : static_cast<uint32_t>(kB);
    b.e0 = b.r * cols + b.c0;
  }
  return b;
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
  const uint32_t* amax;  // NVFP4: the tensor amax from the amax pass
  uint32_t* flag;        // set to 1 on non-finite input
};

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
      const uint32_t c = sc::Nvfp4BlockScaleCode(amax, ginv);
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

// ---- host-side launch helpers --------------------------------------------------------------

cudaError_t MaxCtas(int* max_ctas) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  int sms = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  *max_ctas = (sms > 0 ? sms : 1) * kCtasPerSm;
  return cudaSuccess;
}

// Every kernel takes one parameter struct. Under GIFT_CUDA_HOST_EMULATION
// (tests/kernels/cuda_host_emulation.h: the kernels compiled as C++ and run
// on CPU threads, so that the tests check them on machines without a GPU)
// launches go to the emulator instead.
template <typename Params>
void Launch(void (*kernel)(Params), unsigned grid, cudaStream_t stream, const Params& p) {
#if defined(GIFT_CUDA_HOST_EMULATION)
  (void)stream;
  ::gift::cuda_emulation::Launch(kernel, grid, kThreads, p);
#else
  // clang-format off
  kernel<<<grid, kThreads, 0, stream>>>(p);
  // clang-format on
#endif
}

unsigned GridFor(uint64_t items, uint64_t items_per_cta, int max_ctas) {
  const uint64_t want = items / items_per_cta + (items % items_per_cta != 0 ? 1 : 0);
  if (want < 1) return 1;
  return want > static_cast<uint64_t>(max_ctas) ? static_cast<unsigned>(max_ctas)
                                                : static_cast<unsigned>(want);
}

// Calls launcher.Run<F, K, kB>() for the block-scaled layout `l`.
template <ElementFormat F, ScaleKind K, typename Launcher>
void DispatchBlockSize(const KernelLayout& l, const Launcher& launcher) {
  if (l.block_size == 32) {
    launcher.template Run<F, K, 32>();
  } else {
    launcher.template Run<F, K, 128>();
  }
}

template <ElementFormat F, typename Launcher>
void DispatchBlockScaling(const KernelLayout& l, const Launcher& launcher) {
  if (l.scaling == ScaleKind::kPerBlockFp32) {
    DispatchBlockSize<F, ScaleKind::kPerBlockFp32>(l, launcher);
  } else {
    DispatchBlockSize<F, ScaleKind::kPerBlockE8M0>(l, launcher);
  }
}

template <typename Launcher>
void DispatchBlocks(const KernelLayout& l, const Launcher& launcher) {
  switch (l.format) {
    case ElementFormat::kE4M3:
      DispatchBlockScaling<ElementFormat::kE4M3>(l, launcher);
      break;
    case ElementFormat::kE5M2:
      DispatchBlockScaling<ElementFormat::kE5M2>(l, launcher);
      break;
    case ElementFormat::kE2M1:
      launcher.template Run<ElementFormat::kE2M1, ScaleKind::kNvfp4, 16>();
      break;
    case ElementFormat::kBf16:
    case ElementFormat::kF32:
      break;  // never block-scaled
  }
}

// Calls launcher.Run<F, kPerTensor>() for an unscaled or per-tensor layout.
template <typename Launcher>
void DispatchFlat(const KernelLayout& l, const Launcher& launcher) {
  const bool per_tensor = l.scaling == ScaleKind::kPerTensor;
  switch (l.format) {
    case ElementFormat::kE4M3:
      if (per_tensor) {
        launcher.template Run<ElementFormat::kE4M3, true>();
      } else {
        launcher.template Run<ElementFormat::kE4M3, false>();
      }
      break;
    case ElementFormat::kE5M2:
      if (per_tensor) {
        launcher.template Run<ElementFormat::kE5M2, true>();
      } else {
        launcher.template Run<ElementFormat::kE5M2, false>();
      }
      break;
    case ElementFormat::kBf16:
      launcher.template Run<ElementFormat::kBf16, false>();
      break;
    case ElementFormat::kF32:
      launcher.template Run<ElementFormat::kF32, false>();
      break;
    case ElementFormat::kE2M1:
      break;  // always NVFP4-scaled
  }
}

// Launchers: one kernel launch each, with the grid sized for the work (at
// most max_ctas CTAs; the kernels stride over the rest).
struct EncodeFlatLauncher {
  const FlatEncodeParams& p;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, bool kPerTensor>
  void Run() const {
    const unsigned grid = GridFor(p.n / 4 + 1, kThreads, max_ctas);
    Launch(EncodeFlatKernel<F, kPerTensor>, grid, stream, p);
  }
};

struct DecodeFlatLauncher {
  const FlatDecodeParams& p;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, bool kPerTensor>
  void Run() const {
    const unsigned grid = GridFor(p.n / 4 + 1, kThreads, max_ctas);
    Launch(DecodeFlatKernel<F, kPerTensor>, grid, stream, p);
  }
};

// Quad layout (cols % 4 == 0) or not picks the kernel's thread mapping.
struct EncodeBlocksLauncher {
  const BlockEncodeParams& p;
  bool quad;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, ScaleKind K, int kB>
  void Run() const {
    if (quad) {
      const unsigned grid = GridFor(p.num_blocks, BlockGeometry<kB, true>::kGroupsPerCta, max_ctas);
      Launch(EncodeBlocksKernel<F, K, kB, true>, grid, stream, p);
    } else {
      const unsigned grid =
          GridFor(p.num_blocks, BlockGeometry<kB, false>::kGroupsPerCta, max_ctas);
      Launch(EncodeBlocksKernel<F, K, kB, false>, grid, stream, p);
    }
  }
};

struct DecodeBlocksLauncher {
  const BlockDecodeParams& p;
  bool quad;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, ScaleKind K, int kB>
  void Run() const {
    if (quad) {
      const unsigned grid = GridFor(p.num_blocks, BlockGeometry<kB, true>::kGroupsPerCta, max_ctas);
      Launch(DecodeBlocksKernel<F, K, kB, true>, grid, stream, p);
    } else {
      const unsigned grid =
          GridFor(p.num_blocks, BlockGeometry<kB, false>::kGroupsPerCta, max_ctas);
      Launch(DecodeBlocksKernel<F, K, kB, false>, grid, stream, p);
    }
  }
};

bool IsFlat(ScaleKind s) { return s == ScaleKind::kNone || s == ScaleKind::kPerTensor; }

// Stream-ordered scratch (cudaMallocAsync), with a plain cudaMalloc fallback
// for devices without memory pools. Freed on every path.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() { (void)Release(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  cudaError_t Allocate(size_t bytes) {
    cudaError_t e = cudaMallocAsync(&ptr_, bytes, stream_);
    if (e == cudaSuccess) {
      async_ = true;
      return e;
    }
    ptr_ = nullptr;
    if (e != cudaErrorNotSupported) return e;
    (void)cudaGetLastError();  // clear the non-sticky error
    async_ = false;
    return cudaMalloc(&ptr_, bytes);
  }

  // Stream-ordered free (or synchronize + free for the fallback).
  cudaError_t Release() {
    if (ptr_ == nullptr) return cudaSuccess;
    void* p = ptr_;
    ptr_ = nullptr;
    if (async_) return cudaFreeAsync(p, stream_);
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    const cudaError_t freed = cudaFree(p);
    return sync != cudaSuccess ? sync : freed;
  }

  uint32_t* words() const { return static_cast<uint32_t*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
  bool async_ = false;
};

#define GIFT_CUDA_TRY(expr)                                   \
  do {                                                        \
    const cudaError_t gift_cuda_err_ = (expr);                \
    if (gift_cuda_err_ != cudaSuccess) return gift_cuda_err_; \
  } while (0)

}  // namespace

cudaError_t EncodeAndSync(const EncodeArgs& a, cudaStream_t stream, bool* non_finite) {
  *non_finite = false;
  const KernelLayout& l = a.layout;
  const uint64_t n = l.rows * l.cols;
  int max_ctas = 0;
  GIFT_CUDA_TRY(MaxCtas(&max_ctas));

  // words[0]: tensor amax (|bits|), words[1]: non-finite flag.
  Scratch scratch(stream);
  GIFT_CUDA_TRY(scratch.Allocate(2 * sizeof(uint32_t)));
  GIFT_CUDA_TRY(cudaMemsetAsync(scratch.words(), 0, 2 * sizeof(uint32_t), stream));
  uint32_t* amax = scratch.words();
  uint32_t* flag = scratch.words() + 1;
  const sc::PhiloxKey key{a.philox_k0, a.philox_k1};

  if (l.scaling == ScaleKind::kPerTensor || l.scaling == ScaleKind::kNvfp4) {
    const unsigned grid = GridFor(n / 4 + 1, 2 * kThreads, max_ctas);
    Launch(AmaxKernel, grid, stream, AmaxParams{a.x, n, amax});
    GIFT_CUDA_TRY(cudaGetLastError());
  }

  if (IsFlat(l.scaling)) {
    const FlatEncodeParams p{a.x,          a.codes, a.scales, n,    l.format_max,
                             a.stochastic, key,     a.step,   amax, flag};
    DispatchFlat(l, EncodeFlatLauncher{p, max_ctas, stream});
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
                              amax,
                              flag};
    DispatchBlocks(l, EncodeBlocksLauncher{p, l.cols % 4 == 0, max_ctas, stream});
  }
  GIFT_CUDA_TRY(cudaGetLastError());

  uint32_t words[2] = {0, 0};
  GIFT_CUDA_TRY(
      cudaMemcpyAsync(words, scratch.words(), sizeof(words), cudaMemcpyDeviceToHost, stream));
  GIFT_CUDA_TRY(scratch.Release());
  GIFT_CUDA_TRY(cudaStreamSynchronize(stream));
  *non_finite = words[0] >= sc::kInfBits || words[1] != 0;
  return cudaSuccess;
}

cudaError_t EnqueueDecode(const DecodeArgs& a, cudaStream_t stream) {
  const KernelLayout& l = a.layout;
  const uint64_t n = l.rows * l.cols;
  int max_ctas = 0;
  GIFT_CUDA_TRY(MaxCtas(&max_ctas));
  const Finish finish{a.accumulate, a.apply_post_scale, a.post_scale};
  if (IsFlat(l.scaling)) {
    const FlatDecodeParams p{a.codes, a.scales, a.out, n, finish};
    DispatchFlat(l, DecodeFlatLauncher{p, max_ctas, stream});
  } else {
    const BlockDecodeParams p{a.codes,      a.scales,         a.out, l.cols, l.blocks_per_row,
                              l.num_blocks, l.row_code_bytes, finish};
    DispatchBlocks(l, DecodeBlocksLauncher{p, l.cols % 4 == 0, max_ctas, stream});
  }
  return cudaGetLastError();
}

}  // namespace gift::kernels::internal
