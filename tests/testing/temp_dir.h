// The per-test scratch directory: a gift::TempDir (common/base/temp_dir.h)
// under TEST_TMPDIR when the runner sets it, else under $TMPDIR or /tmp.
// Each call makes a fresh mkdtemp directory, so test processes that ctest
// runs in parallel never share a file name.
//
//   const gift::TempDir dir = test::NewTempDir("gift-server-daemon");
//   options.state_file = dir.File("state.db");
//
// Ownership: the caller owns the returned directory; it is removed with
// everything in it when the gift::TempDir is destroyed, so declare it before
// (destroy it after) the processes that write into it. Thread safety: may be
// called from any thread.
#ifndef GIFT_TESTS_TESTING_TEMP_DIR_H_
#define GIFT_TESTS_TESTING_TEMP_DIR_H_

#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/temp_dir.h"

namespace gift::test {

// A new directory `prefix`-XXXXXX; INTERNAL with errno's text on failure.
// (Inline, so that a header-only fixture can use it without a library.)
inline absl::StatusOr<gift::TempDir> CreateTempDir(absl::string_view prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  return gift::TempDir::Create(prefix, base != nullptr ? base : "");
}

// CreateTempDir for fixtures and test bodies: when the directory cannot be
// made the error escapes as absl::BadStatusOrAccess, which GoogleTest
// reports as the test's failure.
inline gift::TempDir NewTempDir(absl::string_view prefix) {
  return CreateTempDir(prefix).value();
}

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_TEMP_DIR_H_
