// A fresh private directory (mode 0700, from mkdtemp) that is removed with
// everything in it when the owning TempDir is destroyed: scratch space for
// the local-cluster launcher, the benches and the tests.
//
//   GIFT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("gift-bench-cluster"));
//   WriteState(dir.File("state.db"));
//
// Ownership: the object owns the directory; moving transfers it (the
// moved-from object owns nothing). Thread safety: none needed (immutable
// after Create), but the removal in the destructor must not race with users.
#ifndef GIFT_COMMON_BASE_TEMP_DIR_H_
#define GIFT_COMMON_BASE_TEMP_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift {

class TempDir {
 public:
  // A new directory `parent`/`prefix`-XXXXXX. `parent` "" means $TMPDIR when
  // set and not empty, else /tmp. INTERNAL with errno's text on failure.
  static absl::StatusOr<TempDir> Create(absl::string_view prefix, absl::string_view parent = "");

  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(absl::string_view name) const;

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  void Remove();

  std::string path_;  // "" once moved from
};

}  // namespace gift

#endif  // GIFT_COMMON_BASE_TEMP_DIR_H_
