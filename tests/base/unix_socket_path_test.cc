#include "common/base/unix_socket_path.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "common/base/temp_dir.h"
#include "gtest/gtest.h"

namespace gift {
namespace {

// A bound (listening) Unix socket at `path`; -1 on failure.
int BindSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (fd < 0 || bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  return fd;
}

class UnixSocketPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create("gift-sock", "/tmp");  // short: sun_path
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(*std::move(dir));
  }
  std::string File(const std::string& name) { return dir_->File(name); }
  std::optional<TempDir> dir_;
};

TEST_F(UnixSocketPathTest, DialNamesAMissingPathAndWhatAWrongOneIs) {
  absl::Status s = CheckSocketPathToDial(File("none.sock"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no such socket")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "directory")) << s;

  s = CheckSocketPathToDial(File("missing-dir/w.sock"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "does not exist")) << s;

  std::ofstream(File("plain")) << "x";
  s = CheckSocketPathToDial(File("plain"));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not a socket (a regular file)")) << s;
  s = CheckSocketPathToDial(dir_->path());
  EXPECT_TRUE(absl::StrContains(s.message(), "not a socket (a directory)")) << s;

  const int fd = BindSocket(File("w.sock"));
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(CheckSocketPathToDial(File("w.sock")).ok());
  close(fd);

  EXPECT_TRUE(absl::IsInvalidArgument(CheckSocketPathToDial("")));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSocketPathToDial("/" + std::string(200, 'a'))));
}

TEST_F(UnixSocketPathTest, ServeRefusesWhatItWouldHarmOrCouldNotBind) {
  EXPECT_TRUE(CheckSocketPathToServe(File("w.sock"), ".buffers").ok());
  // A stale socket is replaced; a regular file is not deleted.
  const int fd = BindSocket(File("w.sock"));
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(CheckSocketPathToServe(File("w.sock"), ".buffers").ok());
  close(fd);
  std::ofstream(File("w.sock.buffers")) << "keep";
  absl::Status s = CheckSocketPathToServe(File("w.sock"), ".buffers");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "a regular file, not a socket")) << s;

  s = CheckSocketPathToServe(File("missing/w.sock"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "does not exist")) << s;
  std::ofstream(File("file-dir")) << "x";
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckSocketPathToServe(File("file-dir/w.sock"))));
  // The suffix counts towards sun_path.
  const std::string longest(kMaxUnixSocketPathBytes - 4, 'a');
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSocketPathToServe("/tmp/" + longest)));
  if (geteuid() != 0) {  // root may write anywhere
    ASSERT_EQ(chmod(dir_->path().c_str(), 0500), 0);
    EXPECT_TRUE(absl::IsFailedPrecondition(CheckSocketPathToServe(File("x.sock"))));
    chmod(dir_->path().c_str(), 0700);
  }
}

}  // namespace
}  // namespace gift
