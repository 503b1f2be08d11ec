// ||got - want||_2 / ||want||_2, accumulated in double: the one error measure
// the worker's fidelity metrics, the benches and the tests report.
//
// The spans are compared element by element over the shorter of the two
// (callers pass equal lengths). A zero reference gives 0 when `got` is zero
// too, else +infinity (a relative error of a zero signal is unbounded).
//
// Thread safety: pure functions.
#ifndef GIFT_COMMON_BASE_RELATIVE_ERROR_H_
#define GIFT_COMMON_BASE_RELATIVE_ERROR_H_

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/types/span.h"

namespace gift {
namespace internal_relative_error {

template <typename Want>
double RelativeL2(absl::Span<const float> got, absl::Span<const Want> want) {
  double err = 0, norm = 0;
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    err += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  if (norm == 0) return err == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(err / norm);
}

}  // namespace internal_relative_error

inline double RelativeL2(absl::Span<const float> got, absl::Span<const float> want) {
  return internal_relative_error::RelativeL2(got, want);
}
inline double RelativeL2(absl::Span<const float> got, absl::Span<const double> want) {
  return internal_relative_error::RelativeL2(got, want);
}

}  // namespace gift

#endif  // GIFT_COMMON_BASE_RELATIVE_ERROR_H_
