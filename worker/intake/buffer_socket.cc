#include "worker/intake/buffer_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/unix_socket_path.h"

namespace gift::worker {
namespace {

using logging::Level;
using logging::Log;

// Bounds on what one client can make the worker hold.
constexpr int kMaxFdsPerMessage = 8;  // more arrive as a truncated control message

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string NewHandle() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

void Reply(int fd, const std::string& text) {
  // Never blocks and never raises SIGPIPE: a client that does not read its
  // answers only loses them.
  (void)send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BufferSocket>> BufferSocket::Start(const std::string& path,
                                                                 ConnectionClosed on_closed) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  static_assert(sizeof(addr.sun_path) == kMaxUnixSocketPathBytes + 1);
  if (absl::Status s = CheckSocketPathToServe(path); !s.ok()) return s;  // never deletes a file
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  unlink(path.c_str());  // a stale socket of an earlier run
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0) {
    const absl::Status s = Errno(absl::StrCat("bind/listen ", path));
    close(fd);
    return s;
  }
  chmod(path.c_str(), 0660);
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    const absl::Status s = Errno("eventfd");
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return std::unique_ptr<BufferSocket>(new BufferSocket(path, fd, wake, std::move(on_closed)));
}

BufferSocket::BufferSocket(std::string path, int listen_fd, int wake_fd,
                           ConnectionClosed on_closed)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      on_closed_(std::move(on_closed)) {
  server_ = std::thread([this] { Serve(); });
}

BufferSocket::~BufferSocket() {
  const uint64_t one = 1;
  (void)write(wake_fd_, &one, sizeof(one));
  server_.join();
  close(listen_fd_);
  close(wake_fd_);
  unlink(path_.c_str());
}

absl::StatusOr<std::shared_ptr<const SharedBuffer>> BufferSocket::Find(
    absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = handed_.find(handle);
  if (it == handed_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown buffer handle '", handle, "' (hand the buffer over on ", path_,
                     " first; a handle ends when the connection it came on closes)"));
  }
  return it->second.buffer;
}

absl::StatusOr<uint64_t> BufferSocket::ConnectionOf(absl::string_view handle) const {
  absl::MutexLock lock(&mu_);
  auto it = handed_.find(handle);
  if (it == handed_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown buffer handle '", handle, "'"));
  }
  return it->second.connection_number;
}

void BufferSocket::Serve() {
  std::vector<int> connections;
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
    fds.push_back({.fd = listen_fd_, .events = POLLIN, .revents = 0});
    for (int c : connections) fds.push_back({.fd = c, .events = POLLIN, .revents = 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Log(Level::kError, "buffer_socket_poll_failed", {{"error", std::strerror(errno)}});
      break;
    }
    if (fds[0].revents != 0) break;
    std::vector<int> open;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0 || Receive(fds[i].fd)) {
        open.push_back(fds[i].fd);
      } else {
        Drop(fds[i].fd, /*report=*/true);
      }
    }
    connections = std::move(open);
    if (fds[1].revents & POLLIN) {
      const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      ucred peer{};
      socklen_t len = sizeof(peer);
      if (c >= 0) getsockopt(c, SOL_SOCKET, SO_PEERCRED, &peer, &len);
      if (c >= 0 && (connections.size() >= kMaxBufferSocketConnections ||
                     connections_of_uid_[peer.uid] >= kMaxBufferSocketConnectionsPerUser)) {
        const bool per_user = connections.size() < kMaxBufferSocketConnections;
        Reply(c, absl::StrCat("ERR RESOURCE_EXHAUSTED too many connections to the buffer socket",
                              per_user
                                  ? absl::StrCat(" from uid ", peer.uid, " (at most ",
                                                 kMaxBufferSocketConnectionsPerUser, ")")
                                  : absl::StrCat(" (at most ", kMaxBufferSocketConnections, ")")));
        close(c);
        Log(Level::kWarning, "buffer_client_refused",
            {{"pid", static_cast<int64_t>(peer.pid)},
             {"uid", static_cast<int64_t>(peer.uid)},
             {"reason", per_user ? "connections of its uid" : "connections"}});
      } else if (c >= 0) {
        Log(Level::kInfo, "buffer_client_connected",
            {{"pid", static_cast<int64_t>(peer.pid)}, {"uid", static_cast<int64_t>(peer.uid)}});
        connections.push_back(c);
        uid_of_[c] = peer.uid;
        number_of_[c] = next_number_++;
        ++connections_of_uid_[peer.uid];
      }
    }
  }
  // Shutting down: nobody is told (the worker is going away).
  for (int c : connections) Drop(c, /*report=*/false);
}

bool BufferSocket::Receive(int fd) {
  char payload[64];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  iovec iov{.iov_base = payload, .iov_len = sizeof(payload)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  // Every descriptor that arrived is closed below, whatever the answer.
  std::vector<int> received;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received_fd;
      std::memcpy(&received_fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      received.push_back(received_fd);
    }
  }
  struct Closer {
    std::vector<int>* fds;
    ~Closer() {
      for (int f : *fds) close(f);
    }
  } closer{&received};
  if (n <= 0) return false;  // closed (or failed)
  auto fail = [fd](absl::StatusCode code, absl::string_view message) {
    Reply(fd, absl::StrCat("ERR ", absl::StatusCodeToString(code), " ", message));
    return true;
  };
  const absl::string_view text(payload, static_cast<size_t>(n));
  if (absl::StartsWith(text, kBufferReleasePrefix) && received.empty() &&
      !(msg.msg_flags & MSG_TRUNC)) {
    Release(fd, text.substr(kBufferReleasePrefix.size()));
    Reply(fd, "OK");
    return true;
  }
  if (text != kBufferHandoffMagic || (msg.msg_flags & MSG_TRUNC)) {
    return fail(absl::StatusCode::kInvalidArgument,
                absl::StrCat("a handoff is the payload ", kBufferHandoffMagic, " and one memfd"));
  }
  if ((msg.msg_flags & MSG_CTRUNC) || received.size() != 1) {
    return fail(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("a handoff carries exactly one memfd (SCM_RIGHTS); got ", received.size()));
  }
  const uid_t uid = uid_of_[fd];
  {
    absl::MutexLock lock(&mu_);
    if (per_connection_[fd] >= kMaxHandlesPerConnection) {
      return fail(absl::StatusCode::kResourceExhausted,
                  absl::StrCat("at most ", kMaxHandlesPerConnection, " buffers per connection"));
    }
    if (handles_of_uid_[uid] >= kMaxHandlesPerUser) {
      return fail(absl::StatusCode::kResourceExhausted,
                  absl::StrCat("at most ", kMaxHandlesPerUser, " buffers of uid ", uid,
                               " at a time (release some, or close connections)"));
    }
    if (handed_.size() >= kMaxHandles) {
      return fail(absl::StatusCode::kResourceExhausted,
                  absl::StrCat("at most ", kMaxHandles, " buffers at a time on this worker"));
    }
  }
  auto buffer = SharedBuffer::MapSealed(received[0]);
  if (!buffer.ok()) return fail(buffer.status().code(), buffer.status().message());
  const std::string handle = NewHandle();
  {
    absl::MutexLock lock(&mu_);
    handed_[handle] = Handed{.connection = fd,
                             .connection_number = number_of_[fd],
                             .buffer = std::make_shared<const SharedBuffer>(*std::move(buffer))};
    ++per_connection_[fd];
    ++handles_of_uid_[uid];
  }
  Reply(fd, absl::StrCat("OK ", handle));
  return true;
}

void BufferSocket::Release(int fd, absl::string_view handle) {
  absl::MutexLock lock(&mu_);
  auto it = handed_.find(handle);
  if (it == handed_.end() || it->second.connection != fd) return;  // not this client's
  handed_.erase(it);
  --per_connection_[fd];
  --handles_of_uid_[uid_of_[fd]];
}

void BufferSocket::Drop(int fd, bool report) {
  const uid_t uid = uid_of_[fd];
  {
    absl::MutexLock lock(&mu_);
    absl::erase_if(handed_, [fd](const auto& entry) { return entry.second.connection == fd; });
    handles_of_uid_[uid] -= per_connection_[fd];
    per_connection_.erase(fd);
  }
  --connections_of_uid_[uid];
  uid_of_.erase(fd);
  const uint64_t number = number_of_[fd];
  number_of_.erase(fd);
  close(fd);
  if (report && on_closed_) on_closed_(number);
}

}  // namespace gift::worker
