// Device helpers shared by the CUDA codec's kernels (codec_encode_kernels.cu,
// codec_decode_kernels.cu) and the fused forward transform + encode kernel
// (kernels/transform/forward_encode_kernels.cu): the element formats as
// scalar::MiniFloat, little-endian scale and code stores at any alignment,
// quad loads, |bits|.
// Include only from .cu files (or from their host-emulated builds,
// tests/kernels/cuda_host_emulation.h), after the CUDA runtime.
//
// Thread safety: pure functions of their arguments and the memory they are
// given.
#ifndef GIFT_KERNELS_CODEC_CODEC_DEVICE_CUH_
#define GIFT_KERNELS_CODEC_CODEC_DEVICE_CUH_

#include <cstdint>

#include "common/codec/scalar.h"
#include "kernels/codec/codec_kernels.h"

namespace gift::kernels::internal::device {

namespace sc = ::gift::codec::scalar;

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// ---- formats -------------------------------------------------------------------

template <ElementFormat F>
__device__ __forceinline__ const sc::MiniFloat& Mini() {
  if constexpr (F == ElementFormat::kE4M3) {
    return sc::kE4M3;
  } else if constexpr (F == ElementFormat::kE5M2) {
    return sc::kE5M2;
  } else if constexpr (F == ElementFormat::kE2M1) {
    return sc::kE2M1;
  } else if constexpr (F == ElementFormat::kF32) {
    return sc::kF32;
  } else {
    return sc::kBf16;
  }
}

// ---- memory helpers ----------------------------------------------------------------

__device__ __forceinline__ bool IsAligned(const void* p, uintptr_t alignment) {
  return (reinterpret_cast<uintptr_t>(p) & (alignment - 1)) == 0;
}

// FP32 scales are little-endian bytes at any alignment.
__device__ __forceinline__ float LoadF32(const uint8_t* p) {
  uint32_t u;
  if (IsAligned(p, 4)) {
    u = *reinterpret_cast<const uint32_t*>(p);
  } else {
    u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
        (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  }
  return __uint_as_float(u);
}

__device__ __forceinline__ void StoreF32(uint8_t* p, float v) {
  const uint32_t u = __float_as_uint(v);
  if (IsAligned(p, 4)) {
    *reinterpret_cast<uint32_t*>(p) = u;
  } else {
    p[0] = static_cast<uint8_t>(u);
    p[1] = static_cast<uint8_t>(u >> 8);
    p[2] = static_cast<uint8_t>(u >> 16);
    p[3] = static_cast<uint8_t>(u >> 24);
  }
}

__device__ __forceinline__ uint32_t LoadU16(const uint8_t* p) {
  if (IsAligned(p, 2)) return *reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}

__device__ __forceinline__ void StoreU16(uint8_t* p, uint32_t v) {
  if (IsAligned(p, 2)) {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
  } else {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
  }
}

// Four consecutive floats; one 16-byte access when `p` allows it. With
// kReadOnly through the read-only data cache (__ldg): only for memory no
// thread of the kernel writes.
template <bool kReadOnly, typename T>
__device__ __forceinline__ T LoadVia(const T* p) {
  if constexpr (kReadOnly) {
    return __ldg(p);
  } else {
    return *p;
  }
}

template <bool kReadOnly>
__device__ __forceinline__ void LoadQuadVia(const float* p, float v[4]) {
  if (IsAligned(p, 16)) {
    const float4 q = LoadVia<kReadOnly>(reinterpret_cast<const float4*>(p));
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = LoadVia<kReadOnly>(p + k);
  }
}

__device__ __forceinline__ void LoadQuad(const float* p, float v[4]) { LoadQuadVia<true>(p, v); }

// The same for memory this kernel also writes (the accumulator).
__device__ __forceinline__ void LoadQuadRw(const float* p, float v[4]) { LoadQuadVia<false>(p, v); }

__device__ __forceinline__ void StoreQuad(float* p, const float v[4]) {
  if (IsAligned(p, 16)) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = v[k];
  }
}

// Codes of elements [i0, i0 + 4), i0 % 4 == 0, all inside the tensor. For
// E2M1 this needs an even number of columns, so that element i sits in byte
// i / 2 (low nibble for even i).
template <ElementFormat F>
__device__ __forceinline__ void StoreCodeQuad(uint8_t* codes, uint64_t i0, const uint32_t c[4]) {
  if constexpr (F == ElementFormat::kF32) {
    uint8_t* p = codes + 4 * i0;
    if (IsAligned(p, 16)) {
      *reinterpret_cast<uint4*>(p) = make_uint4(c[0], c[1], c[2], c[3]);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) StoreF32(p + 4 * k, sc::BitsToFloat(c[k]));
    }
  } else if constexpr (F == ElementFormat::kBf16) {
    uint8_t* p = codes + 2 * i0;
    if (IsAligned(p, 8)) {
      *reinterpret_cast<uint2*>(p) = make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) StoreU16(p + 2 * k, c[k]);
    }
  } else if constexpr (F == ElementFormat::kE2M1) {
    StoreU16(codes + i0 / 2, c[0] | (c[1] << 4) | (c[2] << 8) | (c[3] << 12));
  } else {
    uint8_t* p = codes + i0;
    if (IsAligned(p, 4)) {
      *reinterpret_cast<uint32_t*>(p) = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(c[k]);
    }
  }
}

__device__ __forceinline__ uint32_t AbsBits(float v) { return sc::FloatToBits(v) & sc::kAbsMask; }

}  // namespace gift::kernels::internal::device

#endif  // GIFT_KERNELS_CODEC_CODEC_DEVICE_CUH_
