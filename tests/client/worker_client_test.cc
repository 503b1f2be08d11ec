// gift_worker_client: sealed shared regions, argument checks and addresses
// without a cluster; then two clients against a real local cluster
// (gift-coordinator + 2 gift-server shards + 2 gift-worker daemons started
// as child processes): the same tensors on both, different gradients in,
// the same bits out, the exact FP32 average with the fp32 codecs, the
// documented error codes, and device tensors refused by a worker that takes
// host buffers only.
#include "worker/client/worker_client.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#ifdef GIFT_WORKER_BIN
#include "tests/testing/test_cluster.h"
#include "tools/gift-cluster/subprocess.h"
#endif

namespace gift::client {
namespace {

TEST(SealedRegionTest, CreatesMapsAndSeals) {
  absl::StatusOr<SealedRegion> region = SealedRegion::Create(64);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->size_bytes(), 64u);
  static_cast<float*>(region->data())[15] = 2.5f;
  // Sealed: neither the client nor anyone it hands the memfd to can resize it.
  EXPECT_NE(ftruncate(region->fd(), 8), 0);
  EXPECT_NE(ftruncate(region->fd(), 128), 0);
  EXPECT_EQ(fcntl(region->fd(), F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  SealedRegion moved = *std::move(region);
  EXPECT_EQ(static_cast<float*>(moved.data())[15], 2.5f);
  EXPECT_EQ(SealedRegion::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BufferChannel::Connect("/nonexistent/x.buffers").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(WorkerClientTest, Targets) {
  EXPECT_EQ(WorkerClient::Target("/run/gift/worker.sock"), "unix:/run/gift/worker.sock");
  EXPECT_EQ(WorkerClient::Target("unix:/x.sock"), "unix:/x.sock");
  EXPECT_EQ(WorkerClient::Target("localhost:7072"), "localhost:7072");
}

TEST(WorkerClientTest, AWrongAddressIsNamedAtOnce) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<WorkerClient>> client =
      WorkerClient::Connect("/nonexistent-dir/worker.sock", {.connect_timeout = absl::Seconds(30)});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kNotFound) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "no such socket")) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "--socket")) << client.status();
  client = WorkerClient::Connect("/proc/self/status", {.connect_timeout = absl::Seconds(30)});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "not a socket")) << client.status();
  client = WorkerClient::Connect("worker.sock", {.connect_timeout = absl::Seconds(30)});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << client.status();
  EXPECT_TRUE(absl::StrContains(client.status().message(), "./worker.sock")) << client.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // none waited for the timeout
}

TEST(WorkerClientTest, UnreachableWorker) {
  // A socket nobody accepts on: the path is right, the worker does not answer.
  const std::string path = absl::StrCat("/tmp/gift-wc-", getpid(), ".sock");
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  absl::StatusOr<std::unique_ptr<WorkerClient>> client =
      WorkerClient::Connect(path, {.connect_timeout = absl::Milliseconds(200)});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  close(fd);
  unlink(path.c_str());

  // Without waiting, the calls fail with UNAVAILABLE instead.
  client = WorkerClient::Connect("/nonexistent-dir/worker.sock",
                                 {.connect_timeout = absl::ZeroDuration(),
                                  .rpc_timeout = absl::Seconds(1),
                                  .push_pull_timeout = absl::Seconds(1)});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<PushPullResult> result = (*client)->PushPull(1);
  EXPECT_TRUE(result.status().code() == absl::StatusCode::kUnavailable ||
              result.status().code() == absl::StatusCode::kDeadlineExceeded)
      << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "PushPull")) << result.status();
}

TEST(WorkerClientTest, RegisterChecksArgumentsBeforeCreatingAnything) {
  absl::StatusOr<std::unique_ptr<WorkerClient>> client = WorkerClient::Connect(
      "/nonexistent-dir/worker.sock", {.connect_timeout = absl::ZeroDuration()});
  ASSERT_TRUE(client.ok());
  for (const std::vector<TensorSpec>& specs : std::vector<std::vector<TensorSpec>>{
           {{"", {2}}},
           {{"a", {}}},
           {{"a", {2, 0}}},
           {{"a", {-1}}},
           {{"a", {2}}, {"a", {2}}},
       }) {
    EXPECT_EQ((*client)->Register(specs).status().code(), absl::StatusCode::kInvalidArgument);
  }
  std::vector<float> not_square(6);
  EXPECT_EQ((*client)->SubmitActivationStats(1, 1, not_square, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

#ifdef GIFT_WORKER_BIN

// coordinator + 2 servers + 2 workers on loopback, in a temporary directory
// (tests/testing/test_cluster.h).
class LocalCluster {
 public:
  static constexpr int kWorkers = 2;

  absl::Status Start() {
    tools::LocalClusterOptions options;
    options.servers = 2;
    options.workers = kWorkers;
    absl::StatusOr<std::unique_ptr<test::TestCluster>> cluster =
        test::TestCluster::Start(options, GIFT_BUILD_DIR);
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    for (int w = 0; w < kWorkers; ++w) sockets_.push_back(cluster_->cluster()->worker_socket(w));
    return absl::OkStatus();
  }

  // giftctl policy set: direct tensors with these codecs. The exit code.
  absl::StatusOr<int> SetCodecs(const std::string& push, const std::string& pull,
                                std::string* output) {
    absl::StatusOr<std::unique_ptr<tools::Subprocess>> ctl = tools::Subprocess::Start(
        {GIFTCTL_BIN, "--coordinator", cluster_->cluster()->coordinator_address(), "policy", "set",
         "--push-codec", push, "--pull-codec", pull, "--selection", "list"});
    if (!ctl.ok()) return ctl.status();
    absl::StatusOr<int> code = (*ctl)->WaitForExit(absl::Seconds(60));
    *output = (*ctl)->stdout_text() + (*ctl)->stderr_text();
    return code;
  }

  const std::vector<std::string>& sockets() const { return sockets_; }

  std::string Logs() const { return cluster_ != nullptr ? cluster_->Logs() : ""; }

  ~LocalCluster() {
    if (cluster_ != nullptr) (void)cluster_->cluster()->Stop(absl::Seconds(30));
  }

 private:
  std::unique_ptr<test::TestCluster> cluster_;
  std::vector<std::string> sockets_;
};

TEST(WorkerClientClusterTest, TwoClientsAverageExactlyAndReportCodes) {
  LocalCluster cluster;
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started << "\n" << cluster.Logs();
  std::string output;
  absl::StatusOr<int> code = cluster.SetCodecs("fp32", "fp32", &output);
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(*code, 0) << output;

  std::vector<std::unique_ptr<WorkerClient>> clients;
  for (const std::string& socket : cluster.sockets()) {
    absl::StatusOr<std::unique_ptr<WorkerClient>> client =
        WorkerClient::Connect(socket, {.connect_timeout = absl::Seconds(30)});
    ASSERT_TRUE(client.ok()) << client.status();
    clients.push_back(*std::move(client));
  }

  // Nothing registered yet.
  absl::StatusOr<PushPullResult> early = clients[0]->PushPull(0);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition) << early.status();

  const std::vector<TensorSpec> specs = {{"layer.weight", {3, 200}}, {"layer.bias", {17}}};
  std::vector<std::vector<SharedTensor>> tensors;
  for (auto& client : clients) {
    absl::StatusOr<std::vector<SharedTensor>> t = client->Register(specs);
    ASSERT_TRUE(t.ok()) << t.status() << "\n" << cluster.Logs();
    ASSERT_EQ(t->size(), specs.size());
    EXPECT_EQ(client->world_size(), 2u);
    tensors.push_back(*std::move(t));
  }
  EXPECT_NE(clients[0]->rank(), clients[1]->rank());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(tensors[0][i].tensor_id(), tensors[1][i].tensor_id());
    EXPECT_EQ(tensors[0][i].name(), specs[i].name);
    EXPECT_NE(tensors[0][i].handle(), tensors[1][i].handle());
    EXPECT_EQ(tensors[0][i].offset_bytes() % 64, 0u);
  }

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  // Writes fresh gradients into both clients' tensors; returns them.
  auto fill = [&] {
    std::vector<std::vector<std::vector<float>>> grads(2);
    for (int w = 0; w < 2; ++w) {
      for (SharedTensor& t : tensors[w]) {
        std::vector<float> g(t.size());
        for (float& v : g) v = normal(rng) * (w == 0 ? 1.0f : 100.0f);
        std::memcpy(t.data(), g.data(), g.size() * sizeof(float));
        grads[w].push_back(std::move(g));
      }
    }
    return grads;
  };
  // Both clients hold exactly (g0 + g1) * 0.5.
  auto expect_average = [&](const std::vector<std::vector<std::vector<float>>>& grads,
                            uint64_t at) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const SharedTensor& a = tensors[0][i];
      const SharedTensor& b = tensors[1][i];
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << a.name();
      size_t mismatches = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        const float expected = (grads[0][i][k] + grads[1][i][k]) * 0.5f;
        if (std::memcmp(&expected, a.data() + k, sizeof(float)) != 0) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0u) << a.name() << " at step " << at;
    }
  };
  uint64_t step = 0;
  for (int round = 0; round < 3; ++round) {
    step = 1 + round;  // steps start low: the first schedule is frozen through step 8 only
    const auto grads = fill();
    auto f0 = clients[0]->PushPullAsync(step, /*measure_error=*/true);
    auto f1 = clients[1]->PushPullAsync(step, /*measure_error=*/true);
    absl::StatusOr<PushPullResult> r0 = f0.get();
    absl::StatusOr<PushPullResult> r1 = f1.get();
    ASSERT_TRUE(r0.ok()) << r0.status() << "\n" << cluster.Logs();
    ASSERT_TRUE(r1.ok()) << r1.status();
    EXPECT_EQ(r0->step, step);
    EXPECT_EQ(r0->world_size, 2u);
    EXPECT_EQ(r0->epoch, r1->epoch);
    ASSERT_EQ(r0->tensors.size(), specs.size());
    for (const TensorResult& t : r0->tensors) {
      EXPECT_FALSE(t.name.empty());
      EXPECT_EQ(t.rel_l2_error, 0.0) << t.name;
      EXPECT_GT(t.bytes_sent, 0u);
    }
    expect_average(grads, step);
  }

  // A step not above the last one.
  absl::StatusOr<PushPullResult> again = clients[0]->PushPull(step);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument) << again.status();
  EXPECT_TRUE(absl::StrContains(again.status().message(), "PushPull: ")) << again.status();
  // An unknown tensor id.
  absl::StatusOr<PushPullResult> unknown = clients[0]->PushPull(step + 1, false, {987654});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument) << unknown.status();

  // Activation statistics of the weight (d_in = 200).
  std::vector<float> gram(200 * 200, 1.0f);
  absl::Status submitted =
      clients[0]->SubmitActivationStats(tensors[0][0].tensor_id(), step, gram, 64);
  EXPECT_TRUE(submitted.ok()) << submitted;
  std::vector<float> wrong(10 * 10, 1.0f);
  EXPECT_EQ(clients[0]->SubmitActivationStats(tensors[0][0].tensor_id(), step, wrong, 64).code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<gift::v1::WorkerInfo> info = clients[1]->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->world_size(), 2u);
  EXPECT_EQ(info->rank(), clients[1]->rank());
  EXPECT_EQ(info->last_step(), step);
  EXPECT_FALSE(info->member_id().empty());

  // Early pushes: client 0 starts the bias, then the weight; client 1 starts
  // nothing early. The step's PushPull completes it, exactly.
  const uint64_t early_step = step + 1;
  const auto grads = fill();
  auto bias = clients[0]->StartTensorsAsync(early_step, {tensors[0][1].tensor_id()});
  auto weight = clients[0]->StartTensorsAsync(early_step, {tensors[0][0].tensor_id()});
  auto twice = clients[0]->StartTensorsAsync(early_step, {tensors[0][0].tensor_id()});
  auto f0 = clients[0]->PushPullAsync(early_step);
  auto f1 = clients[1]->PushPullAsync(early_step);
  EXPECT_TRUE(bias.get().ok());
  EXPECT_TRUE(weight.get().ok());
  const absl::Status refused = twice.get();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "StartTensors: ")) << refused;
  absl::StatusOr<PushPullResult> r0 = f0.get();
  absl::StatusOr<PushPullResult> r1 = f1.get();
  ASSERT_TRUE(r0.ok()) << r0.status() << "\n" << cluster.Logs();
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r0->tensors.size(), specs.size());
  expect_average(grads, early_step);

  // A device tensor (by CUDA IPC) for a worker that takes host buffers only
  // (no device here, or a build without CUDA: cuda_device_count 0) is
  // refused before anything is registered, and the registered set still
  // averages. With a device the worker opens them:
  // tests/worker/device_tensor_cluster_test.cc.
  if (info->cuda_device_count() == 0) {
    DeviceTensorSpec device{"layer.device", {8}, gift::v1::DTYPE_FLOAT32, {}};
    device.buffer.ipc_handle.assign(kCudaIpcHandleBytes, '\x01');
    device.buffer.size_bytes = 8 * sizeof(float);
    const absl::Status s = clients[0]->Register(specs, {device}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "takes host buffers only")) << s;
    const uint64_t after = early_step + 1;
    const auto more = fill();
    auto g0 = clients[0]->PushPullAsync(after);
    auto g1 = clients[1]->PushPullAsync(after);
    EXPECT_TRUE(g0.get().ok());
    EXPECT_TRUE(g1.get().ok());
    expect_average(more, after);
  }
}

// 256 idle connections of another client take every slot of the worker's
// buffer socket (its cap): Register is refused, RESOURCE_EXHAUSTED when the
// worker's reply is still readable, else UNAVAILABLE (a Unix socket closed
// with our handoff unread resets, and the reply may go with it); once they
// close, the next Register connects again rather than reusing the refused
// connection.
TEST(WorkerClientClusterTest, ARefusalAtTheConnectionCapConnectsAgainNextCall) {
  LocalCluster cluster;
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started << "\n" << cluster.Logs();
  absl::StatusOr<std::unique_ptr<WorkerClient>> client =
      WorkerClient::Connect(cluster.sockets()[0], {.connect_timeout = absl::Seconds(30)});
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string path = cluster.sockets()[0] + ".buffers";
  std::vector<int> hogs;
  for (int i = 0; i < 256; ++i) {
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
    hogs.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(500));  // accepted by the worker
  const std::vector<TensorSpec> specs = {{"capped", {8}}};
  absl::StatusOr<std::vector<SharedTensor>> refused = (*client)->Register(specs);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status()) || absl::IsUnavailable(refused.status()))
      << refused.status();
  for (int fd : hogs) close(fd);
  absl::SleepFor(absl::Milliseconds(500));  // the worker sees them close
  absl::StatusOr<std::vector<SharedTensor>> again = (*client)->Register(specs);
  EXPECT_TRUE(again.ok()) << again.status() << "\n" << cluster.Logs();
}

#endif  // GIFT_WORKER_BIN

}  // namespace
}  // namespace gift::client
