// Checks of a Unix domain socket's path before it is served or dialled, so
// that a mistake is named at once ("no such socket", "not a socket", "its
// directory does not exist") instead of surfacing as a connect timeout, a
// half-started daemon or a deleted file.
//
//   if (absl::Status s = CheckSocketPathToServe(path, ".buffers"); !s.ok()) ...
//
// Both only look at the file system (stat, access); they do not connect or
// bind, so a check that passes can still race with another process. Thread
// safety: free functions without state.
#ifndef GIFT_COMMON_BASE_UNIX_SOCKET_PATH_H_
#define GIFT_COMMON_BASE_UNIX_SOCKET_PATH_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gift {

// The longest path a sockaddr_un holds (sun_path less its NUL).
inline constexpr size_t kMaxUnixSocketPathBytes = 107;

// For a server that binds `path` and `path` + `suffix` (e.g. the worker's
// "<socket>.buffers"), replacing a stale socket there:
// - INVALID_ARGUMENT: empty, or `path` + `suffix` longer than sun_path;
// - NOT_FOUND: its directory does not exist;
// - FAILED_PRECONDITION: the directory is not one, or this process may not
//   create files in it; or `path` (or `path` + `suffix`) exists and is not a
//   socket (serving would delete that file).
absl::Status CheckSocketPathToServe(absl::string_view path, absl::string_view suffix = "");

// For a client that connects to `path`:
// - INVALID_ARGUMENT: empty or longer than sun_path;
// - NOT_FOUND "no such socket: <path>" (saying so when the directory is
//   missing too);
// - FAILED_PRECONDITION "<path> is not a socket (a regular file)" and the like.
absl::Status CheckSocketPathToDial(absl::string_view path);

}  // namespace gift

#endif  // GIFT_COMMON_BASE_UNIX_SOCKET_PATH_H_
