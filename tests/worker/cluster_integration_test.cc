// The whole service as real processes on loopback: gift-coordinator, two
// gift-server shards and four gift-worker daemons (tools/gift-cluster
// LocalCluster). This test plays the four training processes: it registers
// sealed shared gradient buffers with each worker over its Unix sockets and
// calls PushPull for every step, as a training loop would.
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/policy/statistics_tensor.h"
#include "gift/v1/worker.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/worker/nvfp4_grid.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/buffer_handoff.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 4;
constexpr int kServers = 2;

// One sealed shared buffer of floats, handed to the worker at
// `worker_socket` (over its buffer socket, "<socket>.buffers").
class HandedBuffer {
 public:
  HandedBuffer(const std::string& worker_socket, size_t floats) : size_(floats * 4) {
    auto region = client::SealedRegion::Create(size_);
    EXPECT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    auto channel = client::BufferChannel::Connect(absl::StrCat(worker_socket, ".buffers"));
    EXPECT_TRUE(channel.ok()) << channel.status();
    channel_ = *std::move(channel);
    auto handle = channel_->Hand(region_.fd());
    EXPECT_TRUE(handle.ok()) << handle.status();
    handle_ = handle.value_or("");
  }
  float* data() { return static_cast<float*>(region_.data()); }
  const std::string& handle() const { return handle_; }
  size_t bytes() const { return size_; }

 private:
  size_t size_;
  client::SealedRegion region_;
  std::unique_ptr<client::BufferChannel> channel_;  // the handle lives with it
  std::string handle_;
};

struct TensorShape {
  std::string name;
  std::vector<int64_t> shape;
  size_t elements() const {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
};

const std::vector<TensorShape>& Shapes() {
  static const auto* shapes = new std::vector<TensorShape>{{"layers.0.attn.q.weight", {96, 64}},
                                                           {"layers.0.mlp.up.weight", {160, 64}},
                                                           {"layers.0.mlp.down.weight", {64, 160}},
                                                           {"layers.0.norm.weight", {1000}}};
  return *shapes;
}

// A training process's side of one worker: buffers + the Worker stub.
struct Trainer {
  std::unique_ptr<gift::v1::Worker::Stub> stub;
  std::vector<std::unique_ptr<HandedBuffer>> buffers;
  std::vector<uint64_t> ids;
  uint32_t rank = 0;
};

// Anisotropic gradients: columns scaled over three orders of magnitude.
void FillGradient(float* g, const TensorShape& t, uint64_t step, int worker) {
  std::mt19937 rng(static_cast<uint32_t>(step * 1000 + worker * 31 + t.elements()));
  std::normal_distribution<float> normal;
  const int64_t cols = t.shape.back();
  for (size_t i = 0; i < t.elements(); ++i) {
    const double scale = std::pow(10.0, -3.0 * static_cast<double>(i % cols) / cols);
    g[i] = static_cast<float>(normal(rng) * scale);
  }
}

std::set<std::string> TensorNames(const gift::v1::ClusterState& state) {
  std::set<std::string> names;
  for (const gift::v1::TensorInfo& t : state.tensors()) names.insert(t.name());
  return names;
}

// The Worker API spoken in raw gRPC (the wire contract, no client library).
// No clean stop: the cluster's processes are killed after each test.
class ClusterIntegrationTest : public test::ClusterFixture<> {
 protected:
  ClusterIntegrationTest() {
    at_tear_down_ = AtTearDown::kKill;
    starts_in_set_up_ = false;
  }

  void Start(int servers = kServers, int workers = kWorkers) {
    StartCluster(test::ShortLeaseOptions(servers, workers));
  }

  // Runs giftctl against the cluster's coordinator; its standard output.
  std::string Giftctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {GIFT_GIFTCTL_BIN, "--coordinator",
                                     cluster_->coordinator_address()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = tools::Subprocess::Start(argv);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return "";
    auto code = (*p)->WaitForExit(absl::Seconds(30));
    EXPECT_TRUE(code.ok());
    EXPECT_EQ(code.value_or(-1), 0) << (*p)->stderr_text() << (*p)->stdout_text();
    return (*p)->stdout_text();
  }

  void SetPolicyWithGiftctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"policy", "set"});
    Giftctl(args);
  }

  void RegisterOverGrpc() {
    trainers_.resize(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      Trainer& t = trainers_[w];
      t.stub = gift::v1::Worker::NewStub(grpc::CreateChannel(
          absl::StrCat("unix:", cluster_->worker_socket(w)), grpc::InsecureChannelCredentials()));
      gift::v1::RegisterBuffersRequest request;
      for (size_t i = 0; i < Shapes().size(); ++i) {
        const TensorShape& s = Shapes()[i];
        t.buffers.push_back(
            std::make_unique<HandedBuffer>(cluster_->worker_socket(w), s.elements()));
        gift::v1::BufferSpec* b = request.add_buffers();
        b->set_name(s.name);
        for (int64_t d : s.shape) b->add_shape(d);
        b->set_dtype(gift::v1::DTYPE_FLOAT32);
        b->mutable_buffer()->set_handle(t.buffers.back()->handle());
        b->mutable_buffer()->set_size_bytes(t.buffers.back()->bytes());
      }
      grpc::ClientContext context;
      gift::v1::RegisterBuffersResponse response;
      const grpc::Status s = t.stub->RegisterBuffers(&context, request, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      ASSERT_EQ(response.buffers_size(), static_cast<int>(Shapes().size()));
      for (const auto& b : response.buffers()) t.ids.push_back(b.tensor_id());
      t.rank = response.rank();
    }
    for (int w = 1; w < kWorkers; ++w) EXPECT_EQ(trainers_[w].ids, trainers_[0].ids);
  }

  // The coordinator's cluster state (empty, with a test failure, when it
  // does not answer).
  gift::v1::ClusterState CoordinatorState() {
    control::CoordinatorClient client(
        control::CoordinatorClient::MakeChannel(cluster_->coordinator_address()),
        absl::Seconds(10));
    auto status = client.GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->state() : gift::v1::ClusterState();
  }

  // PushPull(step) on the given workers at once.
  std::vector<std::pair<grpc::Status, gift::v1::PushPullResponse>> Step(
      const std::vector<int>& workers, uint64_t step, bool measure = false) {
    std::vector<std::future<std::pair<grpc::Status, gift::v1::PushPullResponse>>> calls;
    for (int w : workers) {
      calls.push_back(std::async(std::launch::async, [this, w, step, measure] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
        gift::v1::PushPullRequest request;
        request.set_step(step);
        request.set_measure_error(measure);
        gift::v1::PushPullResponse response;
        grpc::Status s = trainers_[w].stub->PushPull(&context, request, &response);
        return std::make_pair(s, response);
      }));
    }
    std::vector<std::pair<grpc::Status, gift::v1::PushPullResponse>> out;
    for (auto& c : calls) out.push_back(c.get());
    return out;
  }

  std::vector<Trainer> trainers_;
};

TEST_F(ClusterIntegrationTest, Fp32CommunicationIsTheExactFloatAverage) {
  Start();
  SetPolicyWithGiftctl({"--push-codec", "fp32", "--pull-codec", "fp32", "--selection", "list"});
  RegisterOverGrpc();
  std::vector<int> all = {0, 1, 2, 3};
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<std::vector<std::vector<float>>> grads(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        float* g = trainers_[w].buffers[i]->data();
        FillGradient(g, Shapes()[i], step, w);
        grads[w].emplace_back(g, g + Shapes()[i].elements());
      }
    }
    auto results = Step(all, step);
    for (auto& [status, response] : results) {
      ASSERT_TRUE(status.ok()) << status.error_message() << Logs();
      EXPECT_EQ(response.world_size(), static_cast<uint32_t>(kWorkers));
    }
    // The servers sum in rank order.
    std::vector<int> by_rank(kWorkers);
    for (int w = 0; w < kWorkers; ++w) by_rank[trainers_[w].rank] = w;
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        const float* got = trainers_[w].buffers[i]->data();
        for (size_t k = 0; k < Shapes()[i].elements(); ++k) {
          float sum = 0.0f;
          for (int r = 0; r < kWorkers; ++r) sum += grads[by_rank[r]][i][k];
          ASSERT_EQ(got[k], sum * 0.25f) << "worker " << w << " tensor " << i << " element " << k;
        }
      }
    }
  }
  EXPECT_TRUE(cluster_->Stop().ok());
}

TEST_F(ClusterIntegrationTest, FiftyStepsWithARefreshAndAKilledWorker) {
  Start();
  // GIFT on every 2-D tensor (no measurement gate), refreshed every 10 steps.
  SetPolicyWithGiftctl({"--push-codec", "e4m3/block128", "--pull-codec", "bf16", "--selection",
                        "list", "--include", "*", "--period", "10"});
  RegisterOverGrpc();
  constexpr uint64_t kSteps = 50, kKillAt = 30;
  std::vector<int> alive = {0, 1, 2, 3};
  uint64_t epoch_before_kill = 0;
  bool saw_transformed = false;
  std::set<uint64_t> versions_used;  // transformed versions of tensor 0
  for (uint64_t step = 0; step < kSteps; ++step) {
    // Gradients of every live worker; the exact average of the live ones.
    std::vector<std::vector<double>> exact(Shapes().size());
    for (size_t i = 0; i < Shapes().size(); ++i) exact[i].assign(Shapes()[i].elements(), 0.0);
    for (int w : alive) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        FillGradient(trainers_[w].buffers[i]->data(), Shapes()[i], step, w);
      }
    }
    std::vector<int> stepping = alive;
    if (step == kKillAt) {
      // Worker 3 pushes part of the step (one tensor's chunks, which the
      // servers hold for the other ranks) and dies before the rest: its
      // partial contribution must not reach the others' average.
      auto pending = std::async(std::launch::async, [&] {
        grpc::ClientContext context;
        gift::v1::PushPullRequest request;
        request.set_step(step);
        request.add_tensor_ids(trainers_[3].ids[0]);
        gift::v1::PushPullResponse response;
        return trainers_[3].stub->PushPull(&context, request, &response);
      });
      absl::SleepFor(absl::Milliseconds(300));
      ASSERT_TRUE(cluster_->KillWorker(3).ok());
      EXPECT_FALSE(pending.get().ok());  // the daemon is gone
      alive = {0, 1, 2};
      stepping = alive;
    }
    for (int w : stepping) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        const float* g = trainers_[w].buffers[i]->data();
        for (size_t k = 0; k < exact[i].size(); ++k) exact[i][k] += g[k] / stepping.size();
      }
    }
    auto results = Step(stepping, step);
    for (size_t j = 0; j < results.size(); ++j) {
      ASSERT_TRUE(results[j].first.ok()) << "step " << step << " worker " << stepping[j] << ": "
                                         << results[j].first.error_message() << "\n"
                                         << Logs();
    }
    const gift::v1::PushPullResponse& first = results[0].second;
    EXPECT_EQ(first.world_size(), stepping.size()) << "step " << step;
    if (step == kKillAt - 1) epoch_before_kill = first.epoch();
    if (step == kKillAt) {
      EXPECT_GT(first.epoch(), epoch_before_kill);
    }
    // No step mixes versions: every worker used the same basis version of
    // every tensor, in the same epoch.
    for (const auto& [status, response] : results) {
      EXPECT_EQ(response.epoch(), first.epoch()) << "step " << step;
      ASSERT_EQ(response.tensors_size(), first.tensors_size());
      for (int t = 0; t < first.tensors_size(); ++t) {
        EXPECT_EQ(response.tensors(t).basis_version(), first.tensors(t).basis_version())
            << "step " << step << " tensor " << t;
        EXPECT_EQ(response.tensors(t).transformed(), first.tensors(t).transformed());
        saw_transformed = saw_transformed || response.tensors(t).transformed();
        if (t == 0 && response.tensors(t).transformed()) {
          versions_used.insert(response.tensors(t).basis_version());
        }
      }
    }
    // Every worker holds the same bits, within the codec's error of the
    // exact average of exactly the ranks that took part.
    for (size_t i = 0; i < Shapes().size(); ++i) {
      const float* ref = trainers_[stepping[0]].buffers[i]->data();
      for (int w : stepping) {
        ASSERT_EQ(std::memcmp(trainers_[w].buffers[i]->data(), ref, Shapes()[i].elements() * 4), 0)
            << "step " << step << " tensor " << i << " worker " << w;
      }
      double err = 0, norm = 0;
      for (size_t k = 0; k < exact[i].size(); ++k) {
        err += (ref[k] - exact[i][k]) * (ref[k] - exact[i][k]);
        norm += exact[i][k] * exact[i][k];
      }
      // E4M3 has 3 mantissa bits (relative rounding error <= 1/16 per
      // element before averaging), BF16 on the way back adds 1/256.
      EXPECT_LT(std::sqrt(err / norm), 1.0 / 16) << "step " << step << " tensor " << i;
    }
  }
  EXPECT_TRUE(saw_transformed) << "no basis was activated in " << kSteps << " steps\n" << Logs();
  // A refresh happened mid-run: at least two transformed versions were used.
  EXPECT_GE(versions_used.size(), 2u) << Logs();
  // The killed worker was evicted because its connections failed, not after
  // its lease: the survivors ran step 30 in the new epoch (checked above),
  // planned there or retried there. Either the servers' report confirmed
  // it, or the coordinator saw the worker's own connection close while the
  // others awaited it, whichever came first (a killed worker's sockets close
  // as soon as its address space is gone: sooner since cuBLAS is no longer
  // mapped at start, kernels/transform/cublas_on_demand.cc).
  auto confirmed = cluster_->coordinator()->WaitForLine(
      [](const std::string& line) {
        return line.find("\"event\":\"peer_failure_confirmed\"") != std::string::npos ||
               line.find("\"event\":\"awaited_member_disconnected\"") != std::string::npos;
      },
      absl::Seconds(10));
  EXPECT_TRUE(confirmed.ok()) << confirmed.status() << Logs();
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

TEST_F(ClusterIntegrationTest, PerWorkerSourceBuildsBasesFromServerSummedSketches) {
  Start();
  // Per-worker statistics: the owners see only the servers' sums of the
  // workers' sketches (the reduced-gradient fallback is gone), so a basis
  // can only come from sketches that travelled the data path.
  // A drift measurement on every step, so that the bounded wait for the
  // references below is not spent waiting for measure steps.
  SetPolicyWithGiftctl({"--push-codec", "e4m3/block128", "--pull-codec", "bf16", "--selection",
                        "list", "--include", "*", "--period", "10", "--source", "per-worker",
                        "--measure-period", "1"});
  RegisterOverGrpc();
  bool saw_transformed = false;
  uint64_t statistics_sent = 0;  // the most one worker pushed in a step
  auto run_step = [&](uint64_t step) {
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        FillGradient(trainers_[w].buffers[i]->data(), Shapes()[i], step, w);
      }
    }
    for (const auto& [status, response] : Step({0, 1, 2, 3}, step)) {
      ASSERT_TRUE(status.ok()) << "step " << step << ": " << status.error_message() << Logs();
      for (const gift::v1::TensorResult& t : response.tensors()) {
        saw_transformed = saw_transformed || t.transformed();
      }
      statistics_sent = std::max(statistics_sent, response.statistics_bytes_sent());
    }
  };
  uint64_t step = 0;
  for (; step < 25; ++step) {
    run_step(step);
    if (HasFatalFailure()) return;
  }
  EXPECT_TRUE(saw_transformed) << Logs();
  const std::string logs = Logs();
  EXPECT_EQ(logs.find("sketch_exchange_failed"), std::string::npos) << logs;
  // Every 2-D tensor has its statistics tensor; the 1-D one has none; the
  // owners' drift measurements reached the coordinator.
  gift::v1::ClusterState state = CoordinatorState();
  const std::set<std::string> names = TensorNames(state);
  for (const TensorShape& s : Shapes()) {
    EXPECT_EQ(names.count(s.name + "#sketch.both"), s.shape.size() == 2 ? 1u : 0u) << s.name;
  }
  // The sketches travel in BF16: 2 bytes a value and the payloads' headers
  // (4 in FP32), counted apart from the tensors' bytes.
  uint64_t statistics_values = 0;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.name().find("#sketch.") != std::string::npos) statistics_values += t.num_elements();
  }
  EXPECT_GE(statistics_sent, 2 * statistics_values);
  EXPECT_LT(statistics_sent, 3 * statistics_values);
  // A report made on a refresh step has no reference yet (the new basis's
  // first measurement is its reference): step on, a bounded number of
  // steps, until every measured tensor's report has one.
  auto measured_with_reference = [](const gift::v1::ClusterState& state, int* measured) {
    *measured = 0;
    int with_reference = 0;
    for (const gift::v1::TensorBasisState& b : state.bases()) {
      if (!b.has_error_ratio()) continue;
      ++*measured;
      EXPECT_GT(b.error_ratio().ratio(), 0.0);
      if (b.error_ratio().reference() > 0.0) ++with_reference;
    }
    return with_reference;
  };
  int measured = 0;
  for (int extra = 0; extra < 25 && measured_with_reference(state, &measured) < 3;
       ++extra, ++step) {
    run_step(step);
    if (HasFatalFailure()) return;
    state = CoordinatorState();
  }
  EXPECT_EQ(measured, 3);
  EXPECT_EQ(measured_with_reference(state, &measured), 3) << Logs();
  const std::string table = Giftctl({"tensors"});
  EXPECT_NE(table.find("RATIO"), std::string::npos) << table;
  EXPECT_NE(table.find(" (ref "), std::string::npos) << table;
  EXPECT_NE(table.find("CHOICE"), std::string::npos) << table;
  EXPECT_NE(table.find(" r="), std::string::npos) << table;  // a basis's choice
  EXPECT_NE(table.find("#sketch.both"), std::string::npos) << table;
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

// X^T X of 64 anisotropic input rows (columns scaled over two orders of
// magnitude), d_in x d_in, into g.
void FillGram(float* g, int64_t d_in, uint64_t step, int worker) {
  constexpr int kSamples = 64;
  std::mt19937 rng(static_cast<uint32_t>(step * 7919 + worker * 101 + d_in));
  std::normal_distribution<double> normal;
  std::vector<double> x(kSamples * d_in);
  for (int r = 0; r < kSamples; ++r) {
    for (int64_t c = 0; c < d_in; ++c) {
      x[r * d_in + c] = normal(rng) * std::pow(10.0, -2.0 * static_cast<double>(c) / d_in);
    }
  }
  for (int64_t i = 0; i < d_in; ++i) {
    for (int64_t j = 0; j < d_in; ++j) {
      double sum = 0.0;
      for (int r = 0; r < kSamples; ++r) sum += x[r * d_in + i] * x[r * d_in + j];
      g[i * d_in + j] = static_cast<float>(sum);
    }
  }
}

TEST_F(ClusterIntegrationTest, ActivationsPerWorkerSourceBuildsBasesUnderAFittedNvfp4Push) {
  Start();
  // The input side can only come from the activation statistics handed in
  // below and the output side only from the servers' sums of the workers'
  // output-side sketches: a transformed result needs both to have travelled,
  // here in FP8 (the statistics codec) both ways.
  SetPolicyWithGiftctl({"--push-codec", "nvfp4/mse", "--pull-codec", "bf16", "--selection", "list",
                        "--include", "*", "--period", "10", "--source", "activations-per-worker",
                        "--rotation-block", "16", "--statistics-codec", "e4m3/block128/sr"});
  // The MLP matrices' sketches in 32 columns (a per-tensor override), the
  // others in the default 128 (clamped to the side's dimension).
  SetPolicyWithGiftctl({"--tensor", "*.mlp.*", "--statistics-columns", "32"});
  const std::string policy = Giftctl({"policy", "get"});
  EXPECT_NE(policy.find("nvfp4/mse"), std::string::npos) << policy;
  EXPECT_NE(policy.find("activations-per-worker"), std::string::npos) << policy;
  EXPECT_NE(policy.find("e4m3/block128/sr"), std::string::npos) << policy;
  uint64_t statistics_sent = 0, statistics_received = 0;  // the most of one worker's step
  RegisterOverGrpc();
  // Each worker's Gram buffers, one per weight matrix.
  std::vector<std::vector<std::unique_ptr<HandedBuffer>>> grams(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    for (const TensorShape& s : Shapes()) {
      const size_t d_in = static_cast<size_t>(s.shape.back());
      grams[w].push_back(s.shape.size() != 2 ? nullptr
                                             : std::make_unique<HandedBuffer>(
                                                   cluster_->worker_socket(w), d_in * d_in));
    }
  }
  bool saw_transformed = false;
  for (uint64_t step = 0; step < 25; ++step) {
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        const TensorShape& s = Shapes()[i];
        FillGradient(trainers_[w].buffers[i]->data(), s, step, w);
        if (s.shape.size() != 2) continue;
        FillGram(grams[w][i]->data(), s.shape[1], step, w);
        grpc::ClientContext context;
        gift::v1::SubmitActivationStatsRequest request;
        request.set_tensor_id(trainers_[w].ids[i]);
        request.set_step(step);
        request.set_num_samples(64);
        request.mutable_gram()->set_handle(grams[w][i]->handle());
        request.mutable_gram()->set_size_bytes(grams[w][i]->bytes());
        gift::v1::SubmitActivationStatsResponse response;
        const grpc::Status submitted =
            trainers_[w].stub->SubmitActivationStats(&context, request, &response);
        ASSERT_TRUE(submitted.ok()) << submitted.error_message();
      }
    }
    for (const auto& [status, response] : Step({0, 1, 2, 3}, step)) {
      ASSERT_TRUE(status.ok()) << "step " << step << ": " << status.error_message() << Logs();
      for (const gift::v1::TensorResult& t : response.tensors()) {
        saw_transformed = saw_transformed || t.transformed();
      }
      statistics_sent = std::max(statistics_sent, response.statistics_bytes_sent());
      statistics_received = std::max(statistics_received, response.statistics_bytes_received());
    }
  }
  EXPECT_TRUE(saw_transformed) << Logs();
  const std::string logs = Logs();
  EXPECT_EQ(logs.find("sketch_exchange_failed"), std::string::npos) << logs;
  const gift::v1::ClusterState state = CoordinatorState();
  const std::set<std::string> names = TensorNames(state);
  for (const TensorShape& s : Shapes()) {
    const bool mlp = s.name.find(".mlp.") != std::string::npos;
    const std::string output = s.name + "#sketch.output" + (mlp ? ".k32" : "");
    EXPECT_EQ(names.count(output), s.shape.size() == 2 ? 1u : 0u) << s.name;
    EXPECT_EQ(names.count(s.name + "#sketch.both"), 0u) << s.name;
  }
  // Output side n = 160 in 32 columns: n k + n + 1 values, in whole rows.
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.name() == "layers.0.mlp.up.weight#sketch.output.k32") {
      EXPECT_EQ(t.num_elements(),
                policy::StatisticsRows(160 * 32 + 160 + 1) * policy::kStatisticsColumns);
    }
  }
  // E4M3 block-128 both ways: a byte a value, a 4-byte scale per row of 128
  // and the payloads' headers (2 bytes a value in BF16).
  uint64_t statistics_values = 0;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.name().find("#sketch.") != std::string::npos) statistics_values += t.num_elements();
  }
  for (const uint64_t bytes : {statistics_sent, statistics_received}) {
    EXPECT_GE(bytes, statistics_values + statistics_values / 32);
    EXPECT_LT(bytes, 3 * statistics_values / 2);
  }
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

// The fidelity target end to end (the default policy, measured selection,
// FP8 both ways): one tensor whose gradient NVFP4 carries exactly (the same
// grid on every worker, so the average is on it too) is switched by its
// owner to NVFP4 both ways; the others stay direct E4M3. Once the version
// is active, every worker pushes it in NVFP4 and gets it back from the
// servers in NVFP4: exact, fewer bytes, and giftctl tensors says so.
TEST_F(ClusterIntegrationTest, FidelityTargetSendsATensorInFourBitsBothWays) {
  Start();
  SetPolicyWithGiftctl({"--push-codec", "e4m3/block128", "--pull-codec", "e4m3/block128",
                        "--selection", "measured", "--period", "5", "--measure-period", "1"});
  RegisterOverGrpc();
  const size_t q = 0;  // layers.0.attn.q.weight, 96 x 64
  const TensorShape& shape = Shapes()[q];
  uint64_t first_bytes = 0, last_bytes = 0;
  std::vector<float> grid;
  for (uint64_t step = 0; step < 20; ++step) {
    grid = test::Nvfp4Grid(shape.shape[0], shape.shape[1], static_cast<uint32_t>(step));
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Shapes().size(); ++i) {
        float* g = trainers_[w].buffers[i]->data();
        if (i == q) {
          std::copy(grid.begin(), grid.end(), g);
        } else {
          FillGradient(g, Shapes()[i], step, w);
        }
      }
    }
    uint64_t bytes = 0;
    for (const auto& [status, response] : Step({0, 1, 2, 3}, step)) {
      ASSERT_TRUE(status.ok()) << "step " << step << ": " << status.error_message() << Logs();
      for (const gift::v1::TensorResult& t : response.tensors()) bytes += t.bytes_sent();
    }
    if (step == 0) first_bytes = bytes;
    last_bytes = bytes;
  }
  // The last step's average of attn.q came back exact on every worker.
  for (int w = 0; w < kWorkers; ++w) {
    const float* got = trainers_[w].buffers[q]->data();
    for (size_t k = 0; k < shape.elements(); ++k) {
      ASSERT_NEAR(got[k], grid[k], 1e-5f * std::abs(grid[k]) + 1e-7f) << "worker " << w << " " << k;
    }
  }
  const gift::v1::ClusterState state = CoordinatorState();
  const gift::v1::TensorBasisState* basis = nullptr;
  for (const gift::v1::TensorBasisState& b : state.bases()) {
    if (b.tensor_id() == trainers_[0].ids[q]) basis = &b;
  }
  ASSERT_NE(basis, nullptr);
  const gift::v1::BasisVersion& active = basis->versions(basis->versions_size() - 1);
  EXPECT_EQ(active.push_codec().format(), gift::v1::ELEMENT_FORMAT_NVFP4) << Logs();
  EXPECT_EQ(active.pull_codec().format(), gift::v1::ELEMENT_FORMAT_NVFP4);
  EXPECT_LT(last_bytes, first_bytes) << Logs();
  // The owners' reports reach the coordinator with their heartbeats.
  std::string table;
  for (int i = 0; i < 40; ++i) {
    table = Giftctl({"tensors"});
    if (table.find("[target: ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  std::cout << table;
  EXPECT_NE(table.find("nvfp4 / nvfp4"), std::string::npos) << table;
  EXPECT_NE(table.find("[target: e4m3/block128 / e4m3/block128]"), std::string::npos) << table;
  EXPECT_NE(table.find("fidelity target: "), std::string::npos) << table;
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

TEST_F(ClusterIntegrationTest, TrainingGoesOnThroughACoordinatorCrash) {
  Start(/*servers=*/1, /*workers=*/2);
  SetPolicyWithGiftctl({"--push-codec", "fp32", "--pull-codec", "fp32", "--selection", "list"});
  trainers_.clear();
  // Two trainers on the first two workers (Register assumes kWorkers).
  trainers_.resize(2);
  for (int w = 0; w < 2; ++w) {
    Trainer& t = trainers_[w];
    t.stub = gift::v1::Worker::NewStub(grpc::CreateChannel(
        absl::StrCat("unix:", cluster_->worker_socket(w)), grpc::InsecureChannelCredentials()));
    const TensorShape& s = Shapes()[0];
    t.buffers.push_back(std::make_unique<HandedBuffer>(cluster_->worker_socket(w), s.elements()));
    gift::v1::RegisterBuffersRequest request;
    gift::v1::BufferSpec* b = request.add_buffers();
    b->set_name(s.name);
    for (int64_t d : s.shape) b->add_shape(d);
    b->set_dtype(gift::v1::DTYPE_FLOAT32);
    b->mutable_buffer()->set_handle(t.buffers[0]->handle());
    b->mutable_buffer()->set_size_bytes(t.buffers[0]->bytes());
    grpc::ClientContext context;
    gift::v1::RegisterBuffersResponse response;
    ASSERT_TRUE(t.stub->RegisterBuffers(&context, request, &response).ok());
  }
  uint64_t epoch = 0;
  for (uint64_t step = 1; step <= 30; ++step) {
    if (step == 10) {
      ASSERT_TRUE(cluster_->RestartCoordinator().ok()) << Logs();
    }
    std::vector<std::vector<float>> grads(2);
    for (int w = 0; w < 2; ++w) {
      float* g = trainers_[w].buffers[0]->data();
      FillGradient(g, Shapes()[0], step, w);
      grads[w].assign(g, g + Shapes()[0].elements());
    }
    auto results = Step({0, 1}, step);
    for (const auto& [status, response] : results) {
      ASSERT_TRUE(status.ok()) << "step " << step << ": " << status.error_message() << Logs();
      if (epoch == 0) epoch = response.epoch();
      EXPECT_EQ(response.epoch(), epoch) << "step " << step;  // nobody left
    }
    for (int w = 0; w < 2; ++w) {
      const float* got = trainers_[w].buffers[0]->data();
      for (size_t k = 0; k < grads[0].size(); ++k) {
        ASSERT_EQ(got[k], (grads[0][k] + grads[1][k]) * 0.5f) << "step " << step;
      }
    }
  }
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

// Error feedback through the real daemons: every step the same gradients,
// E4M3 pushes, FP32 pulls (so the push is the only rounding) and a basis
// refresh every 10 steps. Without error feedback every step repeats its
// rounding error and the running sum of the averages drifts from the exact
// sum linearly; with it the drift stays bounded by the last residual, so the
// running sum's error relative to the exact sum shrinks like 1/steps, across
// the basis switches.
TEST_F(ClusterIntegrationTest, ErrorFeedbackMakesTheRunningSumConverge) {
  Start();
  SetPolicyWithGiftctl({"--push-codec", "e4m3/block128", "--pull-codec", "fp32", "--selection",
                        "list", "--include", "*", "--period", "10", "--error-feedback", "on"});
  RegisterOverGrpc();
  const std::vector<int> all = {0, 1, 2, 3};
  std::vector<std::vector<double>> exact(Shapes().size());  // the exact average
  for (size_t i = 0; i < Shapes().size(); ++i) {
    exact[i].assign(Shapes()[i].elements(), 0.0);
    for (int w : all) {
      std::vector<float> g(Shapes()[i].elements());
      FillGradient(g.data(), Shapes()[i], 0, w);
      for (size_t k = 0; k < g.size(); ++k) exact[i][k] += g[k] / kWorkers;
    }
  }
  // |running sum - exact sum| (all tensors) after 10 and after 100 steps.
  auto drift = [&](uint64_t first_step) {
    std::vector<std::vector<double>> sum(Shapes().size());
    for (size_t i = 0; i < Shapes().size(); ++i) sum[i].assign(Shapes()[i].elements(), 0.0);
    std::pair<double, double> out;  // (after 10, after 100)
    for (uint64_t s = 1; s <= 100; ++s) {
      for (int w : all) {
        for (size_t i = 0; i < Shapes().size(); ++i) {
          FillGradient(trainers_[w].buffers[i]->data(), Shapes()[i], 0, w);
        }
      }
      for (const auto& [status, response] : Step(all, first_step + s)) {
        EXPECT_TRUE(status.ok()) << status.error_message() << Logs();
      }
      double err = 0;
      for (size_t i = 0; i < Shapes().size(); ++i) {
        const float* avg = trainers_[0].buffers[i]->data();
        for (size_t k = 0; k < sum[i].size(); ++k) {
          sum[i][k] += avg[k];
          const double d = sum[i][k] - static_cast<double>(s) * exact[i][k];
          err += d * d;
        }
      }
      if (s == 10) out.first = std::sqrt(err);
      if (s == 100) out.second = std::sqrt(err);
    }
    return out;
  };
  const auto with = drift(0);
  SetPolicyWithGiftctl({"--error-feedback", "off"});
  const auto without = drift(100);
  // Relative to the exact sum, s * |exact average| after s steps:
  double norm = 0;
  for (const auto& e : exact) {
    for (double v : e) norm += v * v;
  }
  norm = std::sqrt(norm);
  std::cout << "[ ef       ] running-sum error relative to the exact sum after 10 / 100 steps: "
            << "with EF " << with.first / (10 * norm) << " / " << with.second / (100 * norm)
            << ", without " << without.first / (10 * norm) << " / " << without.second / (100 * norm)
            << "\n";
  EXPECT_LT(with.second / 100, with.first / 10 / 5);  // converges
  EXPECT_GT(without.second, 5 * without.first);       // grows ~linearly
  EXPECT_LT(with.second, 0.1 * without.second);
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

TEST_F(ClusterIntegrationTest, TheWorkerApiRejectsBadCallsAndKeepsServing) {
  Start(/*servers=*/1, /*workers=*/1);
  auto stub = gift::v1::Worker::NewStub(grpc::CreateChannel(
      absl::StrCat("unix:", cluster_->worker_socket(0)), grpc::InsecureChannelCredentials()));
  auto push_pull = [&](uint64_t step, std::vector<uint64_t> ids = {}) {
    grpc::ClientContext context;
    gift::v1::PushPullRequest request;
    request.set_step(step);
    for (uint64_t id : ids) request.add_tensor_ids(id);
    gift::v1::PushPullResponse response;
    return stub->PushPull(&context, request, &response);
  };
  EXPECT_EQ(push_pull(0).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  HandedBuffer buffer(cluster_->worker_socket(0), 64 * 32);
  auto spec = [&] {
    gift::v1::RegisterBuffersRequest request;
    gift::v1::BufferSpec* b = request.add_buffers();
    b->set_name("w");
    b->add_shape(64);
    b->add_shape(32);
    b->set_dtype(gift::v1::DTYPE_FLOAT32);
    b->mutable_buffer()->set_handle(buffer.handle());
    b->mutable_buffer()->set_size_bytes(buffer.bytes());
    return request;
  };
  auto code = [&](const gift::v1::RegisterBuffersRequest& request) {
    grpc::ClientContext context;
    gift::v1::RegisterBuffersResponse response;
    const grpc::Status s = stub->RegisterBuffers(&context, request, &response);
    EXPECT_FALSE(s.error_message().empty() && !s.ok());
    return s.error_code();
  };
  EXPECT_EQ(code({}), grpc::StatusCode::INVALID_ARGUMENT);
  auto bad = spec();
  bad.mutable_buffers(0)->set_dtype(gift::v1::DTYPE_BFLOAT16);
  EXPECT_EQ(code(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = spec();
  bad.mutable_buffers(0)->mutable_buffer()->set_size_bytes(buffer.bytes() - 4);
  EXPECT_EQ(code(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = spec();
  bad.mutable_buffers(0)->set_shape(0, -3);
  EXPECT_EQ(code(bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = spec();
  bad.mutable_buffers(0)->mutable_buffer()->set_handle("no-such-handle");
  EXPECT_EQ(code(bad), grpc::StatusCode::NOT_FOUND);
  bad = spec();
  bad.mutable_buffers(0)->mutable_buffer()->set_shm_name("../etc/passwd");
  EXPECT_EQ(code(bad), grpc::StatusCode::INVALID_ARGUMENT);  // named objects are refused
  bad = spec();
  bad.mutable_buffers(0)->mutable_buffer()->set_offset_bytes(4);
  EXPECT_EQ(code(bad), grpc::StatusCode::OUT_OF_RANGE);
  bad = spec();
  bad.mutable_buffers(0)->mutable_buffer()->set_cuda_ipc_handle(std::string(64, 'x'));
#ifdef GIFT_WORKER_WITH_CUDA
  // No device here, or a handle that no process exported (docs/gpu.md, Worker).
  EXPECT_EQ(code(bad), grpc::StatusCode::FAILED_PRECONDITION);
#else
  EXPECT_EQ(code(bad), grpc::StatusCode::UNIMPLEMENTED);  // a build without CUDA
#endif
  ASSERT_EQ(code(spec()), grpc::StatusCode::OK);

  ASSERT_TRUE(push_pull(5).ok());
  EXPECT_EQ(push_pull(5).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push_pull(3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push_pull(6, {12345}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Steps whose key would collide with a measure or sketch exchange (step_key.h).
  EXPECT_EQ(push_pull(uint64_t{1} << 63).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(push_pull(uint64_t{1} << 62).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext context;
    gift::v1::SubmitActivationStatsRequest request;
    request.set_tensor_id(999);
    request.set_num_samples(4);
    gift::v1::SubmitActivationStatsResponse response;
    EXPECT_EQ(stub->SubmitActivationStats(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Still serving; a jump past the frozen schedule (a resumed run) moves it.
  EXPECT_TRUE(push_pull(6).ok());
  EXPECT_TRUE(push_pull(1000).ok());
  grpc::ClientContext context;
  gift::v1::WorkerInfo info;
  ASSERT_TRUE(stub->GetWorkerInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.last_step(), 1000u);
  EXPECT_EQ(info.world_size(), 1u);
  EXPECT_TRUE(cluster_->Stop().ok()) << Logs();
}

}  // namespace
}  // namespace gift::worker
