#include "common/base/unix_socket_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace gift {
namespace {

// "a regular file", "a directory", ... for the error texts.
const char* KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a file of a known kind";
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status CheckLength(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the socket path is empty");
  if (path.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is ", path.size(),
                                                   " bytes; a Unix socket's path holds at most ",
                                                   kMaxUnixSocketPathBytes));
  }
  return absl::OkStatus();
}

// OK when nothing is at `path` or a socket is; else why serving would harm it.
absl::Status CheckReplaceable(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("socket path ", path, ": ", std::strerror(errno)));
  }
  if (S_ISSOCK(st.st_mode)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(path, " exists and is ", KindOf(st.st_mode),
                                                    ", not a socket; refusing to replace it"));
}

}  // namespace

absl::Status CheckSocketPathToServe(absl::string_view path_view, absl::string_view suffix) {
  const std::string path(path_view);
  const std::string longest = absl::StrCat(path, suffix);
  if (absl::Status s = CheckLength(path.empty() ? path : longest); !s.ok()) return s;
  const std::string dir = DirectoryOf(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("the directory of socket ", path, " (", dir, ") does not exist"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the directory of socket ", path, " (", dir, "): ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the directory of socket ", path, " (", dir, ") is ", KindOf(st.st_mode)));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create socket ", path,
                                                      ": no write permission on ", dir, " (",
                                                      std::strerror(errno), ")"));
  }
  if (absl::Status s = CheckReplaceable(path); !s.ok()) return s;
  if (!suffix.empty()) return CheckReplaceable(longest);
  return absl::OkStatus();
}

absl::Status CheckSocketPathToDial(absl::string_view path_view) {
  const std::string path(path_view);
  if (absl::Status s = CheckLength(path); !s.ok()) return s;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket ", path, ": ", std::strerror(errno)));
    }
    const std::string dir = DirectoryOf(path);
    struct stat dir_st;
    const bool dir_exists = stat(dir.c_str(), &dir_st) == 0;
    return absl::NotFoundError(
        absl::StrCat("no such socket: ", path,
                     dir_exists ? "" : absl::StrCat(" (its directory ", dir, " does not exist)")));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a socket (", KindOf(st.st_mode), ")"));
  }
  return absl::OkStatus();
}

}  // namespace gift
