// The host-side launch helpers every kernel family of kernels/ shares (the
// codec's, kernels/codec/codec_kernel_launch.cuh, and the transform's,
// kernels/transform/*.cu): the CTA size, the grid cap from the device's SM
// count, the launch itself or its host emulation, and the CUDA error
// early-return. Include only from .cu files (or their host-emulated builds,
// which include tests/kernels/cuda_host_emulation.h first), after the CUDA
// runtime.
//
// Thread safety: MaxCtas reads the current device; Launch enqueues on the
// stream it is given; nothing else.
#ifndef GIFT_KERNELS_KERNEL_LAUNCH_CUH_
#define GIFT_KERNELS_KERNEL_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gift::kernels::internal::launch {

// Threads per CTA of every kernel here.
constexpr int kThreads = 256;

// The most CTAs a grid-stride kernel launches: `ctas_per_sm` per SM of the
// current device.
inline cudaError_t MaxCtas(int ctas_per_sm, int* max_ctas) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  int sms = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  *max_ctas = (sms > 0 ? sms : 1) * ctas_per_sm;
  return cudaSuccess;
}

// Every kernel takes one parameter struct. Under GIFT_CUDA_HOST_EMULATION
// (tests/kernels/cuda_host_emulation.h: the kernels compiled as C++ and run
// on CPU threads, so that the tests check them on machines without a GPU)
// launches go to the emulator instead. Launch errors: cudaGetLastError.
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

// ceil(items / items_per_cta) CTAs, at least 1 and at most max_ctas.
inline unsigned GridFor(uint64_t items, uint64_t items_per_cta, int max_ctas) {
  const uint64_t want = items / items_per_cta + (items % items_per_cta != 0 ? 1 : 0);
  if (want < 1) return 1;
  return want > static_cast<uint64_t>(max_ctas) ? static_cast<unsigned>(max_ctas)
                                                : static_cast<unsigned>(want);
}

}  // namespace gift::kernels::internal::launch

// Returns the CUDA error of `expr`, if any, from the calling function.
#define GIFT_CUDA_TRY(expr)                                   \
  do {                                                        \
    const cudaError_t gift_cuda_err_ = (expr);                \
    if (gift_cuda_err_ != cudaSuccess) return gift_cuda_err_; \
  } while (0)

#endif  // GIFT_KERNELS_KERNEL_LAUNCH_CUH_
