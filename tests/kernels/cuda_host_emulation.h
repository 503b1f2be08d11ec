// A small CPU emulation of the CUDA execution model, so that the codec's
// kernels (kernels/codec/codec_*_kernels.cu) can be compiled as C++ and tested
// against the CPU codec on machines without a GPU.
//
// What is emulated: a launch runs its CTAs one after another; the threads of
// a CTA are fibers run in turn on the calling thread, each until it finishes
// or reaches a barrier; __syncthreads and the warp shuffles are barriers over
// the CTA and the warp (a thread that returns drops out of both, as an exited
// GPU thread does), so a shuffle that not every lane reaches shows up as
// wrong pairings; __shared__ arrays become function-local statics, which is
// per-CTA memory because only one CTA runs at a time; device memory is host
// memory, and every "asynchronous" runtime call completes before it returns
// (cuda_host_emulation_runtime.cc defines the runtime API functions the
// codec and its tests use, on top of this header's types).
//
// Float arithmetic is the host's IEEE single precision (the project builds
// with -ffp-contract=off), which is exactly what the round-to-nearest device
// intrinsics compute. What it cannot show: alignment faults of wide
// accesses, device code generation, timing.
//
// Include this header before anything that includes <cuda_runtime.h>, then
// include the .cu file. Test-only.
#ifndef GIFT_TESTS_KERNELS_CUDA_HOST_EMULATION_H_
#define GIFT_TESTS_KERNELS_CUDA_HOST_EMULATION_H_

#define GIFT_CUDA_HOST_EMULATION 1

#include <cuda_runtime.h>  // types: float4, uint2, uint3, dim3, cudaError_t, ...
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

// Execution-space and launch annotations mean nothing on the host.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One CTA runs at a time, so a static array is that CTA's shared memory.
#define __shared__ static

namespace gift::cuda_emulation {

constexpr unsigned kWarpSize = 32;

struct ThreadState {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 grid_dim{1, 1, 1};
  dim3 block_dim{1, 1, 1};
};

class Cta;
// The emulated thread running now, and its CTA.
inline ThreadState* current_thread = nullptr;
inline Cta* current_cta = nullptr;

// One CTA: its threads are fibers (ucontext) run round-robin on the calling
// thread, each until it finishes or waits at a barrier. A barrier releases
// when every live thread of its group (CTA or warp) has arrived; a finished
// thread leaves its groups, as an exited GPU thread does.
class Cta {
 public:
  static constexpr size_t kStackBytes = 256 * 1024;

  // `stacks` holds at least `threads` stacks of kStackBytes each.
  Cta(unsigned threads, unsigned block, unsigned grid, std::function<void()> body,
      const std::vector<std::unique_ptr<char[]>>& stacks)
      : body_(std::move(body)),
        fibers_(threads),
        block_{threads, 0, 0},
        warps_((threads + kWarpSize - 1) / kWarpSize) {
    for (unsigned w = 0; w < warps_.size(); ++w) {
      warps_[w].group.live = std::min(kWarpSize, threads - w * kWarpSize);
    }
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = fibers_[t];
      f.state.thread_idx = uint3{t, 0, 0};
      f.state.block_idx = uint3{block, 0, 0};
      f.state.grid_dim = dim3(grid, 1, 1);
      f.state.block_dim = dim3(threads, 1, 1);
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = stacks[t].get();
      f.context.uc_stack.ss_size = kStackBytes;
      f.context.uc_link = &scheduler_;
      makecontext(&f.context, &Cta::Entry, 0);
    }
  }

  // Runs every thread to completion.
  void Run() {
    Cta* const outer_cta = current_cta;
    current_cta = this;
    size_t remaining = fibers_.size();
    while (remaining > 0) {
      for (unsigned t = 0; t < fibers_.size(); ++t) {
        Fiber& f = fibers_[t];
        if (f.done) continue;
        current_ = t;
        current_thread = &f.state;
        swapcontext(&scheduler_, &f.context);
        if (f.done) --remaining;
      }
    }
    current_cta = outer_cta;
    current_thread = nullptr;
  }

  void SyncThreads() { Arrive(block_); }

  // Every lane of the warp publishes `value`; returns lane `src_lane`'s.
  uint32_t Exchange(uint32_t value, unsigned src_lane) {
    Warp& w = warps_[current_ / kWarpSize];
    w.slots[current_ % kWarpSize] = value;
    Arrive(w.group);
    const uint32_t got = w.slots[src_lane];
    Arrive(w.group);
    return got;
  }

 private:
  struct Group {
    unsigned live;
    unsigned arrived;
    uint64_t phase;
  };
  struct Warp {
    Group group{0, 0, 0};
    std::array<uint32_t, kWarpSize> slots{};
  };
  struct Fiber {
    ThreadState state;
    ucontext_t context;
    bool done = false;
  };

  static void Entry() {
    Cta* cta = current_cta;
    cta->body_();
    cta->Exit();
    // Returning resumes the scheduler (uc_link).
  }

  void Yield() { swapcontext(&fibers_[current_].context, &scheduler_); }

  void Arrive(Group& g) {
    const uint64_t phase = g.phase;
    if (++g.arrived == g.live) {
      g.arrived = 0;
      ++g.phase;
      return;
    }
    while (g.phase == phase) Yield();
  }

  void Leave(Group& g) {
    --g.live;
    if (g.arrived > 0 && g.arrived == g.live) {
      g.arrived = 0;
      ++g.phase;
    }
  }

  void Exit() {
    fibers_[current_].done = true;
    Leave(block_);
    Leave(warps_[current_ / kWarpSize].group);
  }

  std::function<void()> body_;
  std::vector<Fiber> fibers_;
  Group block_;
  std::vector<Warp> warps_;
  ucontext_t scheduler_;
  unsigned current_ = 0;
};

// Runs kernel(p) on grid x block emulated threads (1-D launches only), one
// CTA after another.
template <typename Params>
void Launch(void (*kernel)(Params), unsigned grid, unsigned block, const Params& p) {
  // Fiber stacks, kept for later launches (pages are only touched when used).
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() < block) {
    stacks.push_back(std::make_unique_for_overwrite<char[]>(Cta::kStackBytes));
  }
  const std::function<void()> body = [kernel, &p] { kernel(p); };
  for (unsigned b = 0; b < grid; ++b) {
    Cta cta(block, b, grid, body, stacks);
    cta.Run();
  }
}

}  // namespace gift::cuda_emulation

#define threadIdx (::gift::cuda_emulation::current_thread->thread_idx)
#define blockIdx (::gift::cuda_emulation::current_thread->block_idx)
#define gridDim (::gift::cuda_emulation::current_thread->grid_dim)
#define blockDim (::gift::cuda_emulation::current_thread->block_dim)

// ---- device builtins ----------------------------------------------------------

inline void __syncthreads() { ::gift::cuda_emulation::current_cta->SyncThreads(); }

inline unsigned __shfl_xor_sync(unsigned /*mask*/, unsigned value, int lane_mask) {
  const unsigned t = threadIdx.x;
  const unsigned lane = t % 32;
  return ::gift::cuda_emulation::current_cta->Exchange(value,
                                                       lane ^ static_cast<unsigned>(lane_mask));
}

inline unsigned __shfl_down_sync(unsigned /*mask*/, unsigned value, unsigned delta) {
  const unsigned t = threadIdx.x;
  const unsigned lane = t % 32;
  const unsigned src = lane + delta < 32 ? lane + delta : lane;  // out of range: own value
  return ::gift::cuda_emulation::current_cta->Exchange(value, src);
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
// One rounding of a * b + c, as the device's fused multiply-add.
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

inline unsigned atomicOr(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_or(v);
}

inline unsigned atomicMax(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p);
  unsigned old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

#endif  // GIFT_TESTS_KERNELS_CUDA_HOST_EMULATION_H_
