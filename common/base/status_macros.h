// Helpers for propagating absl::Status and absl::StatusOr across module
// boundaries. Header-only; no state.
#ifndef GIFT_COMMON_BASE_STATUS_MACROS_H_
#define GIFT_COMMON_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` is not OK.
#define GIFT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status gift_status_ = (expr);        \
    if (!gift_status_.ok()) return gift_status_; \
  } while (0)

#define GIFT_STATUS_CONCAT_INNER_(a, b) a##b
#define GIFT_STATUS_CONCAT_(a, b) GIFT_STATUS_CONCAT_INNER_(a, b)

// `GIFT_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of a StatusOr or
// returns its status from the enclosing function.
#define GIFT_ASSIGN_OR_RETURN(lhs, expr) \
  GIFT_ASSIGN_OR_RETURN_IMPL_(GIFT_STATUS_CONCAT_(gift_statusor_, __LINE__), lhs, expr)
#define GIFT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#endif  // GIFT_COMMON_BASE_STATUS_MACROS_H_
