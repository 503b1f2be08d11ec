// What the CUDA codec's encode kernels (codec_encode_kernels.cu) and decode
// kernels (codec_decode_kernels.cu) share: the mapping of lane groups onto
// scaling blocks, the codec's grid cap, and the dispatch of a layout to the
// kernel template instance that serves it (the CTA size, the launch itself
// or its host emulation and the grid sizing: kernels/kernel_launch.cuh).
// Include only from those .cu files (or their host-emulated builds,
// tests/kernels/cuda_host_emulation.h), after the CUDA runtime.
//
// Thread safety: the device helpers are pure functions of their arguments;
// the host helpers read the current device and enqueue on the stream they
// are given, nothing else.
#ifndef GIFT_KERNELS_CODEC_CODEC_KERNEL_LAUNCH_CUH_
#define GIFT_KERNELS_CODEC_CODEC_KERNEL_LAUNCH_CUH_

#include <cstdint>

#include "kernels/codec/codec_kernels.h"
#include "kernels/kernel_launch.cuh"

namespace gift::kernels::internal::launch {

constexpr int kWarps = kThreads / 32;
// Grid-stride kernels launch at most this many CTAs per SM (8 are resident
// at 256 threads; the rest queue up as further waves).
constexpr int kCtasPerSm = 16;

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

inline cudaError_t MaxCtas(int* max_ctas) { return MaxCtas(kCtasPerSm, max_ctas); }

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

// Launchers for the dispatchers above: one kernel launch each, with the grid
// sized for the work (at most max_ctas CTAs; the kernels stride over the
// rest). `Kernels` names the kernel instances: Kernels::Flat<F, kPerTensor>()
// and Kernels::Blocks<F, K, kB, kQuad>() return them.
template <typename Kernels, typename Params>
struct FlatLauncher {
  const Params& p;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, bool kPerTensor>
  void Run() const {
    const unsigned grid = GridFor(p.n / 4 + 1, kThreads, max_ctas);
    Launch(Kernels::template Flat<F, kPerTensor>(), grid, stream, p);
  }
};

// Quad layout (cols % 4 == 0) or not picks the kernel's thread mapping.
template <typename Kernels, typename Params>
struct BlocksLauncher {
  const Params& p;
  bool quad;
  int max_ctas;
  cudaStream_t stream;

  template <ElementFormat F, ScaleKind K, int kB>
  void Run() const {
    if (quad) {
      const unsigned grid = GridFor(p.num_blocks, BlockGeometry<kB, true>::kGroupsPerCta, max_ctas);
      Launch(Kernels::template Blocks<F, K, kB, true>(), grid, stream, p);
    } else {
      const unsigned grid =
          GridFor(p.num_blocks, BlockGeometry<kB, false>::kGroupsPerCta, max_ctas);
      Launch(Kernels::template Blocks<F, K, kB, false>(), grid, stream, p);
    }
  }
};

inline bool IsFlat(ScaleKind s) { return s == ScaleKind::kNone || s == ScaleKind::kPerTensor; }

}  // namespace gift::kernels::internal::launch

#endif  // GIFT_KERNELS_CODEC_CODEC_KERNEL_LAUNCH_CUH_
