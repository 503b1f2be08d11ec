// Finding the first non-finite value of a buffer, for the argument checks
// that name the offending element in their error message.
//
// Thread safety: a reentrant function.
#ifndef GIFT_COMMON_BASE_FINITE_H_
#define GIFT_COMMON_BASE_FINITE_H_

#include <cmath>
#include <cstdint>

namespace gift {

// The index of the first of x[0], ..., x[size - 1] that is NaN or +-Inf, or
// -1 when all are finite.
inline int64_t FirstNonFinite(const float* x, int64_t size) {
  for (int64_t i = 0; i < size; ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return -1;
}

}  // namespace gift

#endif  // GIFT_COMMON_BASE_FINITE_H_
