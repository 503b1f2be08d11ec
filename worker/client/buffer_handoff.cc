#include "worker/client/buffer_handoff.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gift::client {
namespace {

constexpr absl::string_view kMagic = "GIFT-BUFFER-1";  // worker/intake/buffer_socket.h
constexpr absl::string_view kRelease = "GIFT-RELEASE-1 ";

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusCode CodeFromName(absl::string_view name) {
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return absl::StatusCode::kUnknown;
}

}  // namespace

absl::StatusOr<SealedRegion> SealedRegion::Create(size_t size_bytes) {
  if (size_bytes == 0) return absl::InvalidArgumentError("a sealed region of 0 bytes");
  SealedRegion region;
  region.fd_ = memfd_create("gift-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (region.fd_ < 0) return Errno("memfd_create");
  if (ftruncate(region.fd_, static_cast<off_t>(size_bytes)) != 0) return Errno("ftruncate");
  if (fcntl(region.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno("F_ADD_SEALS");
  }
  void* data = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd_, 0);
  if (data == MAP_FAILED) return Errno("mmap");
  region.data_ = data;
  region.size_bytes_ = size_bytes;
  return region;
}

SealedRegion::SealedRegion(SealedRegion&& other) noexcept { *this = std::move(other); }

SealedRegion& SealedRegion::operator=(SealedRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

SealedRegion::~SealedRegion() { Reset(); }

void SealedRegion::Reset() {
  if (data_ != nullptr) munmap(data_, size_bytes_);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_bytes_ = 0;
}

absl::StatusOr<std::unique_ptr<BufferChannel>> BufferChannel::Connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("buffer socket path '", path, "'"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the worker's buffer socket ", path, ": ", error));
  }
  // A worker that stops answering fails the handoff instead of hanging it.
  const timeval timeout{.tv_sec = 60, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return std::unique_ptr<BufferChannel>(new BufferChannel(fd));
}

BufferChannel::~BufferChannel() { close(fd_); }

absl::StatusOr<std::string> BufferChannel::Hand(int fd) {
  iovec iov{.iov_base = const_cast<char*>(kMagic.data()), .iov_len = kMagic.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  char reply[512];
  ssize_t n = 0;
  if (sendmsg(fd_, &msg, MSG_NOSIGNAL) < 0) {
    const int send_errno = errno;
    // The worker may have said why before it closed the connection (e.g.
    // its connection cap): report that.
    n = recv(fd_, reply, sizeof(reply), MSG_DONTWAIT);
    if (n < 4 || absl::string_view(reply, 4) != "ERR ") {
      return absl::UnavailableError(
          absl::StrCat("buffer socket: sendmsg: ", std::strerror(send_errno)));
    }
  } else {
    n = recv(fd_, reply, sizeof(reply), 0);
  }
  if (n <= 0) {
    return absl::UnavailableError(n == 0 ? "buffer socket: the worker closed the connection"
                                         : absl::StrCat("buffer socket: recv: ", std::strerror(errno)));
  }
  const absl::string_view text(reply, static_cast<size_t>(n));
  if (text.substr(0, 3) == "OK ") return std::string(text.substr(3));
  if (text.substr(0, 4) == "ERR ") {
    const absl::string_view rest = text.substr(4);
    const size_t space = rest.find(' ');
    return absl::Status(CodeFromName(rest.substr(0, space)),
                        absl::StrCat("buffer socket: ",
                                     space == absl::string_view::npos ? "" : rest.substr(space + 1)));
  }
  return absl::InternalError(absl::StrCat("buffer socket: unexpected reply '", text, "'"));
}

absl::Status BufferChannel::Release(const std::string& handle) {
  const std::string message = absl::StrCat(kRelease, handle);
  if (send(fd_, message.data(), message.size(), MSG_NOSIGNAL) < 0) {
    return absl::UnavailableError(absl::StrCat("buffer socket: send: ", std::strerror(errno)));
  }
  char reply[64];
  if (recv(fd_, reply, sizeof(reply), 0) <= 0) {
    return absl::UnavailableError("buffer socket: no answer to a release");
  }
  return absl::OkStatus();
}

}  // namespace gift::client
