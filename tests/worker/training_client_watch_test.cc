// Whether the training client of a worker's registrations is still there:
// the buffer socket's connection numbers and close reports, and the
// TrainingClientWatch over them (registrations of one run add up; a device
// buffer cannot be watched; a late registration does not undo a newer one).
#include "worker/daemon/training_client_watch.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/client/buffer_handoff.h"
#include "worker/intake/buffer_socket.h"

namespace gift::worker {
namespace {

std::string SocketPath(absl::string_view what) {
  return absl::StrCat(testing::TempDir(), "/gift-tcw-", what, "-", getpid());
}

// A client's connection to the socket with one buffer handed over.
struct Client {
  std::unique_ptr<client::BufferChannel> channel;
  std::string handle;
};

Client Connect(const std::string& path, const client::SealedRegion& region) {
  Client c;
  auto channel = client::BufferChannel::Connect(path);
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return c;
  c.channel = *std::move(channel);
  auto handle = c.channel->Hand(region.fd());
  EXPECT_TRUE(handle.ok()) << handle.status();
  c.handle = handle.value_or("");
  return c;
}

google::protobuf::RepeatedPtrField<gift::v1::BufferSpec> Buffers(
    const std::vector<std::string>& handles, bool with_device_buffer = false) {
  google::protobuf::RepeatedPtrField<gift::v1::BufferSpec> buffers;
  for (const std::string& h : handles) buffers.Add()->mutable_buffer()->set_handle(h);
  if (with_device_buffer) buffers.Add()->mutable_buffer()->set_cuda_ipc_handle("ipc");
  return buffers;
}

// The reports of a watch, and a wait for the next one.
class Reports {
 public:
  TrainingClientWatch::Report Sink() {
    return [this](const gift::v1::TrainingClient& c) {
      absl::MutexLock lock(&mu_);
      seen_.push_back(c);
    };
  }
  // The latest report once there are at least `n` (waits up to 5 s).
  gift::v1::TrainingClient Await(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return seen_.size() >= n; };
    EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5)))
        << "only " << seen_.size() << " reports";
    return seen_.empty() ? gift::v1::TrainingClient() : seen_.back();
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return seen_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<gift::v1::TrainingClient> seen_ ABSL_GUARDED_BY(mu_);
};

TEST(BufferSocketConnectionTest, NumbersConnectionsAndReportsTheirClose) {
  absl::Mutex mu;
  std::vector<uint64_t> closed;
  const std::string path = SocketPath("numbers");
  auto socket = BufferSocket::Start(path, [&](uint64_t c) {
    absl::MutexLock lock(&mu);
    closed.push_back(c);
  });
  ASSERT_TRUE(socket.ok()) << socket.status();
  auto region = client::SealedRegion::Create(64);
  ASSERT_TRUE(region.ok()) << region.status();
  Client a = Connect(path, *region);
  Client b = Connect(path, *region);
  auto ca = (*socket)->ConnectionOf(a.handle);
  auto cb = (*socket)->ConnectionOf(b.handle);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_NE(*ca, *cb);
  EXPECT_EQ((*socket)->ConnectionOf("nope").status().code(), absl::StatusCode::kNotFound);
  // A second buffer on a's connection: the same number.
  auto more = a.channel->Hand(region->fd());
  ASSERT_TRUE(more.ok());
  EXPECT_EQ((*socket)->ConnectionOf(*more).value_or(0), *ca);
  a.channel.reset();
  {
    absl::MutexLock lock(&mu);
    auto one = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !closed.empty(); };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&one), absl::Seconds(5)));
    EXPECT_EQ(closed, std::vector<uint64_t>{*ca});
  }
  // Reported after its handles were dropped.
  EXPECT_EQ((*socket)->ConnectionOf(a.handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*socket)->ConnectionOf(b.handle).ok());
  // A new connection gets a new number; shutting the socket down reports nothing.
  Client c = Connect(path, *region);
  EXPECT_GT((*socket)->ConnectionOf(c.handle).value_or(0), *cb);
  socket->reset();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(closed.size(), 1u);
}

TEST(TrainingClientWatchTest, TheRunsClientsLeaveWhenEveryConnectionOfTheRunHasClosed) {
  Reports reports;
  TrainingClientWatch watch(reports.Sink());
  const std::string path = SocketPath("watch");
  auto socket = BufferSocket::Start(path, [&](uint64_t c) { watch.ConnectionClosed(c); });
  ASSERT_TRUE(socket.ok()) << socket.status();
  auto region = client::SealedRegion::Create(64);
  ASSERT_TRUE(region.ok());
  EXPECT_FALSE(watch.left());

  // The live client of run 1, then a stray one that registers in the same run.
  Client live = Connect(path, *region);
  const uint64_t r1 = watch.NextRegistration();
  EXPECT_EQ(r1, 1u);
  watch.Registered(r1, 1, Buffers({live.handle}), socket->get());
  gift::v1::TrainingClient c = reports.Await(1);
  EXPECT_EQ(c.registration(), 1u);
  EXPECT_EQ(c.run_generation(), 1u);
  EXPECT_TRUE(c.connected());
  Client stray = Connect(path, *region);
  const uint64_t r2 = watch.NextRegistration();
  watch.Registered(r2, 1, Buffers({stray.handle}), socket->get());
  EXPECT_EQ(reports.Await(2).registration(), 2u);
  // The stray leaves: the live one still holds the run.
  stray.channel.reset();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(watch.left());
  EXPECT_EQ(reports.count(), 2u);
  // The live one leaves: reported at once.
  live.channel.reset();
  c = reports.Await(3);
  EXPECT_EQ(c.registration(), 2u);
  EXPECT_FALSE(c.connected());
  EXPECT_TRUE(watch.left());

  // A registration in a new run starts over; one that comes back after a
  // newer one began is ignored.
  Client next = Connect(path, *region);
  const uint64_t r3 = watch.NextRegistration();
  const uint64_t r4 = watch.NextRegistration();
  watch.Registered(r4, 2, Buffers({next.handle}), socket->get());
  c = reports.Await(4);
  EXPECT_EQ(c.registration(), r4);
  EXPECT_EQ(c.run_generation(), 2u);
  EXPECT_TRUE(c.connected());
  watch.Registered(r3, 1, Buffers({}), socket->get());
  EXPECT_EQ(reports.count(), 4u);
  EXPECT_FALSE(watch.left());
}

TEST(TrainingClientWatchTest, AClosedConnectionOrADeviceBuffer) {
  Reports reports;
  TrainingClientWatch watch(reports.Sink());
  const std::string path = SocketPath("device");
  auto socket = BufferSocket::Start(path, [&](uint64_t c) { watch.ConnectionClosed(c); });
  ASSERT_TRUE(socket.ok()) << socket.status();
  auto region = client::SealedRegion::Create(64);
  ASSERT_TRUE(region.ok());
  // Its connection closed before the registration was recorded: gone at once.
  Client gone = Connect(path, *region);
  const std::string handle = gone.handle;
  gone.channel.reset();
  for (int i = 0; i < 500 && (*socket)->ConnectionOf(handle).ok(); ++i) usleep(10000);
  watch.Registered(watch.NextRegistration(), 1, Buffers({handle}), socket->get());
  EXPECT_FALSE(reports.Await(1).connected());
  EXPECT_TRUE(watch.left());
  // A device buffer beside a host one: the run's client stays connected
  // after the host connection closes (nothing tells when it ends).
  Client host = Connect(path, *region);
  watch.Registered(watch.NextRegistration(), 2, Buffers({host.handle}, true), socket->get());
  EXPECT_TRUE(reports.Await(2).connected());
  host.channel.reset();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(watch.left());
  EXPECT_EQ(reports.count(), 2u);
}

}  // namespace
}  // namespace gift::worker
