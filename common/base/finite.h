// Finding the first non-finite value of a buffer, for the argument checks
// that name the offending element in their error message.
//
// Thread safety: a reentrant function.
#ifndef GIFT_COMMON_BASE_FINITE_H_
#define GIFT_COMMON_BASE_FINITE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gift {

// The index of the first of x[0], ..., x[size - 1] that is NaN or +-Inf, or
// -1 when all are finite. Scans spans of 1,024 values with a branch-free
// test of the exponent bits (which the compiler vectorizes) and looks for
// the index only in a span that has one.
inline int64_t FirstNonFinite(const float* x, int64_t size) {
  constexpr int64_t kSpan = 1024;
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: Inf or NaN
  for (int64_t start = 0; start < size; start += kSpan) {
    const int64_t n = size - start < kSpan ? size - start : kSpan;
    uint32_t any = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + start + i, sizeof(bits));
      any |= static_cast<uint32_t>((bits & kExponent) == kExponent);
    }
    if (any == 0) continue;
    for (int64_t i = start; i < start + n; ++i) {
      if (!std::isfinite(x[i])) return i;
    }
  }
  return -1;
}

}  // namespace gift

#endif  // GIFT_COMMON_BASE_FINITE_H_
