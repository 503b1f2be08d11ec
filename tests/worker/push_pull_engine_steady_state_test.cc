// The engine's steady state runs at memory speed: after warm-up, a step of
// four workers' engines (over UCX, against aggregator shards in a separate
// process, so only the engines are measured) allocates nothing of 64 KiB or
// more through operator new, and takes (almost) no minor page faults, while
// the results stay bit-identical to the exact local re-computation.
//
// The bound asserted: zero allocations >= 64 KiB in 50 steps (the chunk
// payloads here are 72-130 KiB, the tensors 1 MiB), and at most
// kMaxFaultsPerStep minor faults per step for the whole process (four
// engines, their UCX progress threads, the test's threads), where allocating
// one tensor's buffers per step would take hundreds (the fault bound is not
// asserted under AddressSanitizer, see kBoundFaults).
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/push_pull_engine.h"

extern char** environ;

// Counts operator new calls of 64 KiB or more while counting is on, in every
// thread of the process.
namespace {
constexpr size_t kLargeAllocation = 64 * 1024;
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_large_allocations{0};

void* Allocate(size_t n, size_t alignment) {
  if (n >= kLargeAllocation && g_counting.load(std::memory_order_relaxed)) {
    g_large_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(n == 0 ? 1 : n)
                : std::aligned_alloc(alignment, (n + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return Allocate(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
// The replaced operator new allocates with malloc (CountedAlloc), so free is
// its match; GCC cannot see that when it inlines these at -O1.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace gift::worker {
namespace {

using testing::Tensor;

constexpr uint32_t kWorld = 4;
constexpr int kWarmupSteps = 5;
constexpr int kMeasuredSteps = 50;
constexpr double kMaxFaultsPerStep = 4.0;
// AddressSanitizer's allocator quarantines freed memory and hands out fresh
// pages (and faults in their shadow), so small per-step bookkeeping faults
// there: the fault bound holds for the real allocator only.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kBoundFaults = false;
#else
constexpr bool kBoundFaults = true;
#endif

// x -> 2x, exactly invertible and allocation-free: the transformed path
// without the costs of a real basis (whose own temporaries are not the
// engine's).
class DoublingTransform final : public transform::GradientTransform {
 public:
  DoublingTransform(int64_t d_out, int64_t d_in) : d_out_(d_out), d_in_(d_in) {}
  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override {
    for (int64_t i = 0; i < d_out * d_in; ++i) out[i] = 2.0f * in[i];
    return absl::OkStatus();
  }
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override {
    for (int64_t i = 0; i < d_out * d_in; ++i) out[i] = 0.5f * in[i];
    return absl::OkStatus();
  }
  int64_t d_out() const override { return d_out_; }
  int64_t d_in() const override { return d_in_; }
  std::string name() const override { return "doubling"; }

 private:
  int64_t d_out_, d_in_;
};

const std::vector<Tensor> kTensors = {
    {11, 256, 1024, 64, true},   // transformed, 4 chunks of 64 rows (72 KiB payloads)
    {12, 512, 512, 128, false},  // direct, 4 chunks of 128 rows
    {13, 1, 3000, 0, false},     // direct, one row in pieces of 512
};

// The shards process (aggregator_shards_process.cc), driven over pipes.
class ShardsProcess {
 public:
  bool Start(int shards, const std::string& pull_spec) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::string count = std::to_string(shards);
    char* argv[] = {const_cast<char*>(GIFT_SHARDS_PROCESS), count.data(),
                    const_cast<char*>(pull_spec.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, GIFT_SHARDS_PROCESS, &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (rc != 0) return false;
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    for (std::string line; (line = ReadLine()) != "ready";) {
      if (line.rfind("shard ", 0) != 0) return false;
      addresses_.push_back(absl::HexStringToBytes(line.substr(6)));
    }
    return true;
  }
  ~ShardsProcess() {
    if (in_ != nullptr) fclose(in_);
    if (out_ != nullptr) fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  std::string Command(const std::string& line) {
    fprintf(in_, "%s\n", line.c_str());
    fflush(in_);
    return line.rfind("epoch", 0) == 0 ? ReadLine() : "";
  }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::string ReadLine() {
    char buf[4096];
    if (fgets(buf, sizeof buf, out_) == nullptr) return "";
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::vector<std::string> addresses_;
};

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(PushPullEngineSteadyState, StepsAllocateAndFaultInNothingOfTheirSize) {
  const codec::CodecSpec push = codec::ParseCodecSpec("e4m3/block32").value();
  const codec::CodecSpec pull = codec::ParseCodecSpec("bf16").value();
  ShardsProcess shards;
  ASSERT_TRUE(shards.Start(2, "bf16"));
  ASSERT_EQ(shards.addresses().size(), 2u);
  const std::vector<std::string>& servers = shards.addresses();

  ThreadPool pool(2);
  std::vector<std::unique_ptr<PushPullEngine>> engines;
  for (uint32_t r = 0; r < kWorld; ++r) {
    auto engine = PushPullEngine::Create(
        [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); },
        {.codec_options = {.pool = &pool}, .timeout = absl::Seconds(30)});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engines.push_back(*std::move(engine));
  }
  std::ostringstream epoch;
  epoch << "epoch 1";
  for (const auto& e : engines) epoch << " " << absl::BytesToHexString(e->address());
  for (const Tensor& t : kTensors) {
    for (const ChunkRoute& c : testing::Routes(t, servers)) {
      const auto shape = dataplane::ChunkShapeOf(t.rows * t.cols, t.cols, c.offset, c.num_elements);
      const size_t shard = c.server == servers[0] ? 0 : 1;
      shards.Command("chunk " + std::to_string(shard) + " " + std::to_string(t.id) + " " +
                     std::to_string(c.index) + " " + std::to_string(shape->rows) + " " +
                     std::to_string(shape->cols));
    }
  }
  ASSERT_EQ(shards.Command(epoch.str()), "ok");

  const auto doubling = std::make_shared<DoublingTransform>(256, 1024);
  // Gradients of even and odd steps, each rank's buffers and plan, all made
  // before anything is measured.
  std::vector<std::vector<std::vector<float>>> grads[2];
  std::vector<std::vector<std::vector<float>>> buffers(kWorld);
  std::vector<StepPlan> plans(kWorld);
  for (int parity = 0; parity < 2; ++parity) {
    grads[parity].resize(kWorld);
    for (uint32_t r = 0; r < kWorld; ++r) {
      for (const Tensor& t : kTensors) grads[parity][r].push_back(testing::Gradient(t, r, parity));
    }
  }
  for (uint32_t r = 0; r < kWorld; ++r) {
    buffers[r] = grads[0][r];
    plans[r] = {.epoch = 1, .rank = r, .world_size = kWorld};
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const Tensor& t = kTensors[i];
      plans[r].tensors.push_back({.tensor_id = t.id,
                                  .rows = t.rows,
                                  .cols = t.cols,
                                  .data = buffers[r][i].data(),
                                  .transform = t.transformed ? doubling : nullptr,
                                  .basis_version = t.transformed ? 1u : 0u,
                                  .chunks = testing::Routes(t, servers),
                                  .push_spec = push});
    }
  }

  constexpr int kSteps = kWarmupSteps + kMeasuredSteps;
  std::vector<absl::Status> failures(kWorld);
  std::barrier start(kWorld + 1), done(kWorld + 1);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int s = 0; s < kSteps; ++s) {
        start.arrive_and_wait();
        for (size_t i = 0; i < kTensors.size(); ++i) {
          std::memcpy(buffers[r][i].data(), grads[s % 2][r][i].data(),
                      sizeof(float) * buffers[r][i].size());
        }
        plans[r].step = static_cast<uint64_t>(s);
        auto report = engines[r]->Run(plans[r]);
        if (!report.ok() && failures[r].ok()) failures[r] = report.status();
        done.arrive_and_wait();
      }
    });
  }
  long faults_before = 0;
  int mismatches = 0;
  for (int s = 0; s < kSteps; ++s) {
    if (s == kWarmupSteps) {
      faults_before = MinorFaults();
      g_counting = true;
    }
    start.arrive_and_wait();
    done.arrive_and_wait();
    for (uint32_t r = 1; r < kWorld; ++r) {
      for (size_t i = 0; i < kTensors.size(); ++i) {
        if (std::memcmp(buffers[r][i].data(), buffers[0][i].data(),
                        sizeof(float) * buffers[0][i].size()) != 0) {
          ++mismatches;
        }
      }
    }
  }
  g_counting = false;
  const long faults = MinorFaults() - faults_before;
  const uint64_t large = g_large_allocations.load();
  for (auto& th : threads) th.join();
  for (uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(failures[r].ok()) << failures[r];
  EXPECT_EQ(mismatches, 0) << "ranks disagree";

  // The last step's results (an even or odd step's gradients) against the
  // exact local re-computation of the servers' and the engine's work.
  const uint64_t last = kSteps - 1;
  for (size_t i = 0; i < kTensors.size(); ++i) {
    const Tensor& t = kTensors[i];
    std::vector<float> want = testing::LocalAverage(t, last % 2, kWorld, servers, push, pull,
                                                    t.transformed ? doubling.get() : nullptr);
    // LocalAverage keys the codec by the gradient's step; the engine ran it
    // as step `last`: the codecs here round to nearest, so keys do not
    // matter.
    EXPECT_EQ(buffers[0][i], want) << "tensor " << t.id;
  }

  std::cout << "[ steady   ] " << kMeasuredSteps << " steps x " << kWorld
            << " engines: allocations >= 64 KiB: " << large << ", minor faults: " << faults << " ("
            << double(faults) / kMeasuredSteps << " per step)\n";
  EXPECT_EQ(large, 0u);
  if (kBoundFaults) {
    EXPECT_LE(double(faults) / kMeasuredSteps, kMaxFaultsPerStep);
  }
}

}  // namespace
}  // namespace gift::worker
