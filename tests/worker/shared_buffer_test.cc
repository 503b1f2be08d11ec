// SharedBuffer (sealed memfds only), the BufferSocket handoff protocol with
// the client's BufferChannel, and the 16-bit conversions of the daemon.
#include "worker/intake/shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/client/buffer_handoff.h"
#include "worker/intake/buffer_socket.h"
#include "worker/intake/dtype_conversion.h"

namespace gift::worker {
namespace {

int Memfd(size_t bytes, int seals) {
  const int fd = memfd_create("gift-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

TEST(SharedBufferTest, SharesBytesBothWaysAndRangesAreChecked) {
  const int fd = Memfd(3 * 4096, F_SEAL_SHRINK | F_SEAL_GROW);
  char* mine = static_cast<char*>(
      mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  std::memcpy(mine + 5000, "gradient", 8);
  auto buffer = SharedBuffer::MapSealed(fd);
  close(fd);  // the mapping keeps the memory
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->size(), 3u * 4096);
  auto range = buffer->Range(5000, 100, 4);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(std::memcmp(*range, "gradient", 8), 0);
  std::memcpy(*range, "average!", 8);
  EXPECT_EQ(std::memcmp(mine + 5000, "average!", 8), 0);
  EXPECT_EQ(buffer->Range(0, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->Range(UINT64_MAX - 2, 8, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->Range(2, 8, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->Range(3 * 4096 - 4, 8, 4).status().code(), absl::StatusCode::kOutOfRange);
  SharedBuffer moved = *std::move(buffer);
  EXPECT_EQ(std::memcmp(moved.data() + 5000, "average!", 8), 0);
  munmap(mine, 3 * 4096);
}

TEST(SharedBufferTest, RefusesWhatCouldShrinkOrIsNotAMemfd) {
  // Unsealed: the client could ftruncate it later and make the worker fault.
  int fd = Memfd(4096, 0);
  EXPECT_EQ(SharedBuffer::MapSealed(fd).status().code(), absl::StatusCode::kFailedPrecondition);
  close(fd);
  // Growing only sealed is not enough either.
  fd = Memfd(4096, F_SEAL_GROW);
  EXPECT_EQ(SharedBuffer::MapSealed(fd).status().code(), absl::StatusCode::kFailedPrecondition);
  close(fd);
  // A named POSIX shm object cannot be sealed at all.
  const std::string name = absl::StrCat("/gift-test-", getpid(), "-named");
  fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  shm_unlink(name.c_str());
  EXPECT_EQ(SharedBuffer::MapSealed(fd).status().code(), absl::StatusCode::kFailedPrecondition);
  close(fd);
  // Empty, read-only, not a regular file.
  fd = Memfd(0, F_SEAL_SHRINK);
  EXPECT_EQ(SharedBuffer::MapSealed(fd).status().code(), absl::StatusCode::kFailedPrecondition);
  close(fd);
  fd = Memfd(4096, F_SEAL_SHRINK);
  const int ro = open(absl::StrCat("/proc/self/fd/", fd).c_str(), O_RDONLY);
  EXPECT_EQ(SharedBuffer::MapSealed(ro).status().code(), absl::StatusCode::kFailedPrecondition);
  close(ro);
  close(fd);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(SharedBuffer::MapSealed(pipe_fds[0]).status().code(),
            absl::StatusCode::kFailedPrecondition);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(BufferSocketTest, HandsOverSealedRegionsAndForgetsThemWithTheConnection) {
  const std::string path = absl::StrCat(testing::TempDir(), "/gift-bs-", getpid());
  auto socket = BufferSocket::Start(path);
  ASSERT_TRUE(socket.ok()) << socket.status();
  auto region = client::SealedRegion::Create(256);
  ASSERT_TRUE(region.ok()) << region.status();
  static_cast<float*>(region->data())[3] = 4.5f;
  // The seals hold against the client itself.
  EXPECT_NE(ftruncate(region->fd(), 16), 0);
  std::string handle;
  {
    auto channel = client::BufferChannel::Connect(path);
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto h = (*channel)->Hand(region->fd());
    ASSERT_TRUE(h.ok()) << h.status();
    handle = *h;
    EXPECT_EQ(handle.size(), 32u);
    auto found = (*socket)->Find(handle);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(reinterpret_cast<const float*>((*found)->data())[3], 4.5f);
    // An unsealed memfd and a pipe are refused with the worker's reason.
    const int unsealed = Memfd(64, 0);
    auto refused = (*channel)->Hand(unsealed);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
    EXPECT_NE(refused.status().message().find("F_SEAL_SHRINK"), std::string::npos);
    close(unsealed);
    EXPECT_EQ((*socket)->Find("00000000000000000000000000000000").status().code(),
              absl::StatusCode::kNotFound);
    // Another connection cannot release it; its own can.
    auto other = client::BufferChannel::Connect(path);
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE((*other)->Release(handle).ok());
    EXPECT_TRUE((*socket)->Find(handle).ok());
    auto second = (*channel)->Hand(region->fd());
    ASSERT_TRUE(second.ok()) << second.status();
    ASSERT_TRUE((*channel)->Release(*second).ok());
    EXPECT_EQ((*socket)->Find(*second).status().code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE((*socket)->Find(handle).ok());
  }
  // The handle ends with the connection (polled by the server thread).
  for (int i = 0; i < 200 && (*socket)->Find(handle).ok(); ++i) usleep(10000);
  EXPECT_EQ((*socket)->Find(handle).status().code(), absl::StatusCode::kNotFound);
}

size_t OpenFds() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Sends `payload` with `fds` on a fresh connection; returns the answer.
std::string RawHandoff(const std::string& path, absl::string_view payload,
                       const std::vector<int>& fds) {
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  EXPECT_EQ(connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  iovec iov{.iov_base = const_cast<char*>(payload.data()), .iov_len = payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  EXPECT_GE(sendmsg(s, &msg, MSG_NOSIGNAL), 0);
  char reply[512];
  const ssize_t n = recv(s, reply, sizeof(reply), 0);
  close(s);
  return n > 0 ? std::string(reply, static_cast<size_t>(n)) : "";
}

TEST(BufferSocketTest, MalformedHandoffsAreRefusedAndLeakNoDescriptor) {
  const std::string path = absl::StrCat(testing::TempDir(), "/gift-bs-raw-", getpid());
  auto socket = BufferSocket::Start(path);
  ASSERT_TRUE(socket.ok()) << socket.status();
  const int a = Memfd(4096, F_SEAL_SHRINK);
  const int b = Memfd(4096, F_SEAL_SHRINK);
  const size_t before = OpenFds();
  EXPECT_EQ(RawHandoff(path, "HELLO", {a}).rfind("ERR INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(RawHandoff(path, kBufferHandoffMagic, {}).rfind("ERR INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(RawHandoff(path, kBufferHandoffMagic, {a, b}).rfind("ERR INVALID_ARGUMENT", 0), 0u);
  std::vector<int> many(12, a);  // more than the worker takes in one message
  EXPECT_EQ(RawHandoff(path, kBufferHandoffMagic, many).rfind("ERR INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(RawHandoff(path, kBufferHandoffMagic, {a}).rfind("OK ", 0), 0u);
  // Every descriptor that reached the worker was closed again (the accepted
  // one is mapped, not kept open), and the connections are gone.
  for (int i = 0; i < 200 && OpenFds() != before; ++i) usleep(10000);
  EXPECT_EQ(OpenFds(), before);
  close(a);
  close(b);
}

// ---- 16-bit conversions -----------------------------------------------------

uint16_t Bits16(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

// Reference bf16 rounding: nearest even via double arithmetic.
uint16_t RefBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  const uint32_t lower = u & 0xFFFF0000u;
  const uint32_t upper = lower + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lower, 4);
  std::memcpy(&hi, &upper, 4);
  // Past the largest finite bf16 the next step up is 2^128 (infinity).
  const double hi_d = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), f) : hi;
  const double dl = std::fabs(static_cast<double>(f) - lo);
  const double dh = std::fabs(hi_d - f);
  if (dl < dh || (dl == dh && ((lower >> 16) & 1) == 0)) return static_cast<uint16_t>(lower >> 16);
  return static_cast<uint16_t>(upper >> 16);
}

std::vector<float> Samples() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                          -1e9f, 6e-8f, 3e-8f, 2.9e-8f, 6.1e-5f, 1e-45f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(), 1.00390625f, 1.01171875f};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  return v;
}

TEST(DtypeConversionTest, Bf16RoundsToNearestEvenAndWidensExactly) {
  const std::vector<float> in = Samples();
  std::vector<uint16_t> narrow(in.size());
  F32ToBf16(in.data(), narrow.data(), in.size());
  std::vector<float> wide(in.size());
  Bf16ToF32(narrow.data(), wide.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(narrow[i], RefBf16(in[i])) << in[i];
    uint32_t u;
    std::memcpy(&u, &wide[i], 4);
    ASSERT_EQ(u, static_cast<uint32_t>(narrow[i]) << 16);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t h;
  F32ToBf16(&nan, &h, 1);
  float back;
  Bf16ToF32(&h, &back, 1);
  EXPECT_TRUE(std::isnan(back));
}

TEST(DtypeConversionTest, Fp16MatchesTheCompilersConversions) {
  const std::vector<float> in = Samples();
  std::vector<uint16_t> narrow(in.size());
  F32ToF16(in.data(), narrow.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(narrow[i], Bits16(static_cast<_Float16>(in[i]))) << in[i];
  }
  // Every 16-bit pattern widens like the compiler's conversion.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  F16ToF32(all.data(), wide.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    _Float16 h;
    std::memcpy(&h, &all[i], 2);
    const float want = static_cast<float>(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(wide[i])) << i;
    } else {
      ASSERT_EQ(wide[i], want) << i;
    }
  }
  // Odd lengths take the scalar tail.
  const float three[3] = {1.0f, 0.5f, -2.0f};
  uint16_t out[3];
  F32ToF16(three, out, 3);
  EXPECT_EQ(out[2], Bits16(static_cast<_Float16>(-2.0f)));
}

}  // namespace
}  // namespace gift::worker
