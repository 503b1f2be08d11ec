// What the x86-64 CPU this process runs on can do, from CPUID, for the code
// paths that dispatch at run time (the codec's F16C decode, the worker's
// 16-bit conversions). GCC's and clang's __builtin_cpu_supports do not agree
// on the feature names (clang 14 has no "f16c"), so both compilers go
// through CPUID here.
//
// Thread safety: pure functions (each computes once, thread-safely).
#ifndef GIFT_COMMON_BASE_CPU_FEATURES_H_
#define GIFT_COMMON_BASE_CPU_FEATURES_H_

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gift {

// AVX with the OS saving YMM state (OSXSAVE and XCR0 bits 1-2), and F16C
// (vcvtph2ps / vcvtps2ph): CPUID leaf 1, ECX bits 27, 28, 29.
inline bool CpuHasAvxF16c() {
#if defined(__x86_64__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((ecx & bit_OSXSAVE) == 0 || (ecx & bit_AVX) == 0 || (ecx & bit_F16C) == 0) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 0x6) == 0x6;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace gift

#endif  // GIFT_COMMON_BASE_CPU_FEATURES_H_
