// WorkerCore (worker/daemon/worker_core.h) with tensors registered as CUDA IPC
// buffers, in process: a real coordinator (tests/testing/coordinator_server.h),
// a real aggregator shard with its daemon and two workers' push-pull engines
// on UCX over loopback, each worker a WorkerCore with its buffer socket.
// Rank 0 registers two of its three tensors as device buffers (an FP32 one,
// the engine's device stage, and a BF16 one, staged through the host)
// through a fake DeviceMemory: the FP32 one in the host emulation's device
// memory (tests/kernels/cuda_host_emulation.h; the device stage's kernels
// run there), the BF16 one in the fake's guarded memory, which faults on any
// host access but the fake's copies; the rest are host buffers. Checked against the same cluster
// with every tensor in host buffers:
//
//   - direct codecs: every average bit-identical to the all-host run's, on
//     both ranks; a measured step's rel_l2_error equal to the host run's;
//   - a GIFT basis (the owner builds and publishes it from the steps'
//     gradients, the device tensor's read through DeviceMemory): once the
//     tensors run in their basis, rank 0's averages (inverse on the device)
//     within 1e-5 relative of rank 1's (on the CPU);
//   - a RegisterBuffers with one bad device buffer registers nothing, and
//     GetWorkerInfo answers the device count.
//
// Built only with CUDA, over the emulation (worker_core_device_emulated_test),
// so it runs everywhere, GPU or not.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/temp_dir.h"
#include "common/control/member_session.h"
#include "common/transport/ucx/ucx_transport.h"
#include "gtest/gtest.h"
#include "server/aggregator/aggregator_daemon.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/testing/coordinator_server.h"
#include "tests/testing/warmup_bound.h"
#include "tests/worker/fake_device_memory.h"
#include "worker/client/buffer_handoff.h"
#include "worker/cuda/device_codec_stage.h"
#include "worker/daemon/step_key.h"
#include "worker/daemon/worker_core.h"
#include "worker/engine/push_pull_engine.h"
#include "worker/intake/dtype_conversion.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 2;

struct TensorDef {
  const char* name;
  std::vector<int64_t> shape;
  gift::v1::DType dtype;
  bool device;  // on rank 0, in a device run
  uint64_t elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
  uint64_t bytes() const { return elements() * (dtype == gift::v1::DTYPE_FLOAT32 ? 4 : 2); }
};

const std::vector<TensorDef>& Tensors() {
  static const auto* tensors = new std::vector<TensorDef>{
      {"layers.0.w", {48, 80}, gift::v1::DTYPE_FLOAT32, true},
      {"layers.0.h", {32, 64}, gift::v1::DTYPE_BFLOAT16, true},
      {"layers.0.b", {80}, gift::v1::DTYPE_FLOAT32, false},
  };
  return *tensors;
}

// Rank `rank`'s gradient of `step` for tensor `t`: Gaussian with a few
// large columns (a geometry for the basis to find), exact in BF16.
std::vector<float> Gradient(int rank, uint64_t step, size_t t) {
  const TensorDef& def = Tensors()[t];
  std::mt19937 rng(static_cast<uint32_t>(1000 * rank + 10 * step + t));
  std::normal_distribution<float> normal;
  std::vector<float> g(def.elements());
  const uint64_t cols = static_cast<uint64_t>(def.shape.back());
  for (uint64_t i = 0; i < g.size(); ++i) g[i] = normal(rng) * (i % cols % 16 == 0 ? 8.0f : 1.0f);
  if (def.dtype != gift::v1::DTYPE_FLOAT32) {
    std::vector<uint16_t> b(g.size());
    F32ToBf16(g.data(), b.data(), g.size());
    Bf16ToF32(b.data(), g.data(), g.size());
  }
  return g;
}

uint64_t Align(uint64_t n) { return (n + 255) / 256 * 256; }

// One worker: its engine, session and WorkerCore, its buffer channel and
// sealed region (host tensors), and its device allocation (device tensors).
struct Worker {
  std::unique_ptr<control::MemberSession> session;
  std::unique_ptr<WorkerCore> core;
  std::unique_ptr<client::BufferChannel> channel;
  client::SealedRegion region;
  std::string region_handle;
  // Device tensors: FP32 ones in one emulated cudaMalloc allocation (the
  // emulated device stage reads it), 16-bit ones in one guarded allocation
  // of the fake (the host must reach them only through DeviceMemory).
  char* device_allocation = nullptr;
  std::string device_handle;
  char* guarded_allocation = nullptr;
  std::string guarded_handle;
  std::vector<uint64_t> offsets;  // per tensor, in the region or its allocation
  std::vector<bool> on_device;
  std::vector<uint64_t> ids;
};

class Cluster {
 public:
  ~Cluster() {
    for (Worker& w : workers_) {
      w.channel.reset();
      w.core.reset();
      if (w.session != nullptr) w.session->Close().IgnoreError();
      if (w.device_allocation != nullptr) cudaFree(w.device_allocation);
    }
    aggregator_.reset();
    if (server_session_ != nullptr) server_session_->Close().IgnoreError();
    shard_.reset();
    coordinator_.reset();
  }

  // A coordinator with `policy`, one aggregator shard, two workers; rank 0's
  // device tensors in device memory when `device`.
  // Without `device_stage`, rank 0's engine has no device stage; `staged`:
  // none either, and the core stages rank 0's FP32 device tensor through the
  // host (the daemon's path).
  void Start(const gift::v1::Policy& policy, bool device, bool device_stage = true,
             bool staged = false) {
    auto dir = TempDir::Create("gift-worker-core-device");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(*std::move(dir));
    auto coordinator = test::CoordinatorServer::Start();
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    gift::v1::SetPolicyRequest set;
    *set.mutable_policy() = policy;
    auto applied = coordinator_->state()->SetPolicy(set);
    ASSERT_TRUE(applied.ok()) << applied.status();

    auto ucx = [](transport::TransportHandlers h) {
      return transport::CreateUcxTransport(std::move(h));
    };
    auto shard = server::AggregatorShard::Create({}, ucx);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *std::move(shard);
    auto server_session = control::MemberSession::Start(coordinator_->channel(),
                                                        {.name = "server-0",
                                                         .role = gift::v1::MEMBER_ROLE_SERVER,
                                                         .data_address = shard_->address()});
    ASSERT_TRUE(server_session.ok()) << server_session.status();
    server_session_ = *std::move(server_session);
    aggregator_ = std::make_unique<server::AggregatorDaemon>(shard_.get(), server_session_.get());

    workers_.resize(kWorkers);
    for (int r = 0; r < kWorkers; ++r) {
      Worker& w = workers_[r];
      PushPullEngineOptions engine_options{.timeout = absl::Seconds(30)};
      if (device && device_stage && r == 0)
        engine_options.device_stages = DeviceCodecStage::Factory();
      auto engine = PushPullEngine::Create(ucx, engine_options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      // Ranks follow join order: worker 0 joins first.
      auto session = control::MemberSession::Start(
          coordinator_->channel(),
          {.name = absl::StrCat("worker-", r), .data_address = (*engine)->address()});
      ASSERT_TRUE(session.ok()) << session.status();
      w.session = *std::move(session);
      ASSERT_EQ(w.session->rank(), static_cast<uint32_t>(r));
      w.core = std::make_unique<WorkerCore>(
          *std::move(engine), w.session.get(),
          WorkerCoreOptions{
              .step_timeout = absl::Seconds(60),
              .min_workers = kWorkers,
              .device = {.memory = &memory_, .engine_device_stage = device && r == 0 && !staged}});
      const std::string socket = dir_->File(absl::StrCat("worker-", r, ".buffers"));
      ASSERT_TRUE(w.core->ServeBuffers(socket).ok());
      auto channel = client::BufferChannel::Connect(socket);
      ASSERT_TRUE(channel.ok()) << channel.status();
      w.channel = *std::move(channel);
      uint64_t host_bytes = 0, device_bytes = 0, guarded_bytes = 0;
      for (const TensorDef& def : Tensors()) {
        const bool on_device = device && r == 0 && def.device;
        uint64_t& end = !on_device                             ? host_bytes
                        : def.dtype == gift::v1::DTYPE_FLOAT32 ? device_bytes
                                                               : guarded_bytes;
        w.offsets.push_back(end);
        w.on_device.push_back(on_device);
        end = Align(end + def.bytes());
      }
      auto region = client::SealedRegion::Create(host_bytes);
      ASSERT_TRUE(region.ok()) << region.status();
      w.region = *std::move(region);
      auto handle = w.channel->Hand(w.region.fd());
      ASSERT_TRUE(handle.ok()) << handle.status();
      w.region_handle = *handle;
      if (device_bytes > 0) {
        void* p = nullptr;
        ASSERT_EQ(cudaMalloc(&p, device_bytes), cudaSuccess);
        w.device_allocation = static_cast<char*>(p);
        w.device_handle = memory_.Export(p, device_bytes);
      }
      if (guarded_bytes > 0) {
        w.guarded_allocation = static_cast<char*>(memory_.AllocateGuarded(guarded_bytes));
        ASSERT_NE(w.guarded_allocation, nullptr);
        w.guarded_handle = memory_.Export(w.guarded_allocation, guarded_bytes);
      }
    }
  }

  gift::v1::RegisterBuffersRequest RegisterRequest(int r) const {
    const Worker& w = workers_[r];
    gift::v1::RegisterBuffersRequest request;
    for (size_t t = 0; t < Tensors().size(); ++t) {
      const TensorDef& def = Tensors()[t];
      gift::v1::BufferSpec* b = request.add_buffers();
      b->set_name(def.name);
      for (int64_t d : def.shape) b->add_shape(d);
      b->set_dtype(def.dtype);
      if (w.on_device[t]) {
        b->mutable_buffer()->set_cuda_ipc_handle(
            def.dtype == gift::v1::DTYPE_FLOAT32 ? w.device_handle : w.guarded_handle);
        b->mutable_buffer()->set_cuda_device(0);
      } else {
        b->mutable_buffer()->set_handle(w.region_handle);
      }
      b->mutable_buffer()->set_offset_bytes(w.offsets[t]);
      b->mutable_buffer()->set_size_bytes(def.bytes());
    }
    return request;
  }

  void Register() {
    for (int r = 0; r < kWorkers; ++r) {
      auto registered = workers_[r].core->RegisterBuffers(RegisterRequest(r));
      ASSERT_TRUE(registered.ok()) << registered.status();
      for (const gift::v1::RegisteredBuffer& b : registered->buffers()) {
        workers_[r].ids.push_back(b.tensor_id());
      }
    }
  }

  // Writes every rank's gradients of `step`, runs PushPull on all ranks at
  // once and returns each rank's response and averages (FP32, per tensor).
  struct RankResult {
    gift::v1::PushPullResponse response;
    std::vector<std::vector<float>> averages;
  };
  // `early`: the tensors' pushes are started with StartTensors (in reverse
  // order, as backward finishes them) before the PushPull.
  std::vector<RankResult> Step(uint64_t step, bool measure, bool early = false) {
    for (int r = 0; r < kWorkers; ++r) {
      for (size_t t = 0; t < Tensors().size(); ++t) Write(r, t, Gradient(r, step, t));
    }
    std::vector<absl::StatusOr<gift::v1::PushPullResponse>> responses(kWorkers);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorkers; ++r) {
      threads.emplace_back([&, r] {
        for (size_t t = Tensors().size(); early && t-- > 0;) {
          gift::v1::StartTensorsRequest start;
          start.set_step(step);
          start.add_tensor_ids(workers_[r].ids[t]);
          const absl::Status started = workers_[r].core->StartTensors(start);
          EXPECT_TRUE(started.ok()) << "rank " << r << ": " << started;
        }
        gift::v1::PushPullRequest request;
        request.set_step(step);
        request.set_measure_error(measure);
        responses[r] = workers_[r].core->PushPull(request);
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<RankResult> out(kWorkers);
    for (int r = 0; r < kWorkers; ++r) {
      EXPECT_TRUE(responses[r].ok()) << "rank " << r << ": " << responses[r].status();
      if (!responses[r].ok()) return {};
      out[r].response = *responses[r];
      for (size_t t = 0; t < Tensors().size(); ++t) out[r].averages.push_back(Read(r, t));
    }
    return out;
  }

  WorkerCore* core(int r) { return workers_[r].core.get(); }
  const testing::FakeDeviceMemory& memory() const { return memory_; }

 private:
  // The tensor's bytes in the buffer's dtype, in host or device memory.
  void Write(int r, size_t t, const std::vector<float>& values) {
    const Worker& w = workers_[r];
    const TensorDef& def = Tensors()[t];
    std::vector<uint16_t> narrow;
    const void* src = values.data();
    if (def.dtype != gift::v1::DTYPE_FLOAT32) {
      narrow.resize(values.size());
      F32ToBf16(values.data(), narrow.data(), values.size());
      src = narrow.data();
    }
    if (w.on_device[t] && def.dtype != gift::v1::DTYPE_FLOAT32) {
      char* dst = w.guarded_allocation + w.offsets[t];
      memory_.TestCopy(dst, src, def.bytes(), dst);
    } else if (w.on_device[t]) {
      ASSERT_EQ(
          cudaMemcpy(w.device_allocation + w.offsets[t], src, def.bytes(), cudaMemcpyHostToDevice),
          cudaSuccess);
    } else {
      std::memcpy(static_cast<char*>(w.region.data()) + w.offsets[t], src, def.bytes());
    }
  }

  std::vector<float> Read(int r, size_t t) const {
    const Worker& w = workers_[r];
    const TensorDef& def = Tensors()[t];
    std::vector<char> bytes(def.bytes());
    if (w.on_device[t] && def.dtype != gift::v1::DTYPE_FLOAT32) {
      const char* src = w.guarded_allocation + w.offsets[t];
      memory_.TestCopy(bytes.data(), src, bytes.size(), src);
    } else if (w.on_device[t]) {
      EXPECT_EQ(cudaMemcpy(bytes.data(), w.device_allocation + w.offsets[t], bytes.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    } else {
      std::memcpy(bytes.data(), static_cast<const char*>(w.region.data()) + w.offsets[t],
                  bytes.size());
    }
    std::vector<float> values(def.elements());
    if (def.dtype == gift::v1::DTYPE_FLOAT32) {
      std::memcpy(values.data(), bytes.data(), bytes.size());
    } else {
      Bf16ToF32(reinterpret_cast<const uint16_t*>(bytes.data()), values.data(), values.size());
    }
    return values;
  }

  std::unique_ptr<TempDir> dir_;
  testing::FakeDeviceMemory memory_;
  std::unique_ptr<test::CoordinatorServer> coordinator_;
  std::unique_ptr<server::AggregatorShard> shard_;
  std::unique_ptr<control::MemberSession> server_session_;
  std::unique_ptr<server::AggregatorDaemon> aggregator_;
  std::vector<Worker> workers_;
};

gift::v1::Policy ListPolicy(bool gift) {
  gift::v1::Policy policy;
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  if (gift) {
    policy.mutable_selection()->add_include("*");  // every 2-D tensor, always
    policy.mutable_refresh()->set_period_steps(4);
    // Per-worker sketches: rank 0's device tensor is sketched from a host copy.
    policy.mutable_transform()->set_source(gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS);
  } else {
    policy.mutable_selection()->add_exclude("*");
  }
  return policy;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(WorkerCoreDeviceTest, DirectCodecsAverageDeviceTensorsBitForBitAsHostOnes) {
  Cluster device, host, staged;
  ASSERT_NO_FATAL_FAILURE(device.Start(ListPolicy(false), true));
  ASSERT_NO_FATAL_FAILURE(host.Start(ListPolicy(false), false));
  ASSERT_NO_FATAL_FAILURE(staged.Start(ListPolicy(false), true, false, /*staged=*/true));

  // A bad device buffer: nothing is registered, the rest keeps working.
  gift::v1::RegisterBuffersRequest bad = device.RegisterRequest(0);
  bad.mutable_buffers(1)->mutable_buffer()->set_offset_bytes(1u << 30);  // past the allocation
  auto refused = device.core(0)->RegisterBuffers(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("layers.0.h"), absl::string_view::npos)
      << refused.status();
  gift::v1::PushPullRequest early;
  early.set_step(kMaxTrainingStep + 1);
  EXPECT_EQ(device.core(0)->PushPull(early).status().code(),
            absl::StatusCode::kInvalidArgument);  // past the step keys' range
  early.set_step(1);
  EXPECT_EQ(device.core(0)->PushPull(early).status().code(),
            absl::StatusCode::kFailedPrecondition);  // nothing registered
  EXPECT_EQ(device.core(0)->Info().cuda_device_count(), 1);

  ASSERT_NO_FATAL_FAILURE(device.Register());
  ASSERT_NO_FATAL_FAILURE(host.Register());
  ASSERT_NO_FATAL_FAILURE(staged.Register());
  for (uint64_t step = 1; step <= 4; ++step) {
    const bool measure = step == 3;
    const bool early = step == 4;  // StartTensors (worker_core_overlap.cc)
    auto d = device.Step(step, measure, early);
    auto h = host.Step(step, measure, early);
    auto st = staged.Step(step, measure, early);
    ASSERT_EQ(st.size(), size_t{kWorkers});
    ASSERT_EQ(d.size(), size_t{kWorkers});
    ASSERT_EQ(h.size(), size_t{kWorkers});
    for (int r = 0; r < kWorkers; ++r) {
      for (size_t t = 0; t < Tensors().size(); ++t) {
        SCOPED_TRACE(absl::StrCat("step ", step, " rank ", r, " ", Tensors()[t].name));
        EXPECT_TRUE(BitIdentical(d[r].averages[t], h[r].averages[t]));
        EXPECT_TRUE(BitIdentical(st[r].averages[t], h[r].averages[t]));
        EXPECT_TRUE(BitIdentical(d[r].averages[t], d[0].averages[t]));
        // Not the gradient: the step wrote the average back.
        EXPECT_FALSE(BitIdentical(d[r].averages[t], Gradient(r, step, t)));
        const gift::v1::TensorResult& dt = d[r].response.tensors(static_cast<int>(t));
        const gift::v1::TensorResult& ht = h[r].response.tensors(static_cast<int>(t));
        EXPECT_FALSE(dt.transformed());
        if (measure) {
          EXPECT_GT(dt.rel_l2_error(), 0.0);
          EXPECT_EQ(dt.rel_l2_error(), ht.rel_l2_error());
          EXPECT_EQ(st[r].response.tensors(static_cast<int>(t)).rel_l2_error(), ht.rel_l2_error());
        }
      }
    }
  }
  // The device FP32 tensor went through the device stage (no host copies of
  // it outside the measured step and the BF16 staging): the fake saw the
  // BF16 tensor's widen + narrow per step, and the measured step's exact
  // copy and error read of the FP32 one.
  EXPECT_EQ(device.memory().mapped(), 2u);  // each allocation opened once
  EXPECT_EQ(device.memory().copies_to_device(), 4u);
  EXPECT_EQ(device.memory().copies_to_host(), 4u + 2u);
  // Staged: both device tensors copied in and out once per step.
  EXPECT_EQ(staged.memory().copies_to_device(), 2u * 4u);
  EXPECT_EQ(staged.memory().copies_to_host(), 2u * 4u);
}

TEST(WorkerCoreDeviceTest, DeviceTensorsNeedTheEnginesDeviceStage) {
  // The FP32 device tensor reaches the engine as a device tensor: without a
  // device stage the engine refuses it (and nothing reads it on the host).
  Cluster device;
  ASSERT_NO_FATAL_FAILURE(device.Start(ListPolicy(false), true, /*device_stage=*/false));
  ASSERT_NO_FATAL_FAILURE(device.Register());
  gift::v1::PushPullRequest request;
  request.set_step(1);
  auto refused = device.core(0)->PushPull(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
}

TEST(WorkerCoreDeviceTest, GiftBasisAveragesOnTheDeviceWithinToleranceOfTheHost) {
  Cluster device;
  ASSERT_NO_FATAL_FAILURE(device.Start(ListPolicy(true), true));
  ASSERT_NO_FATAL_FAILURE(device.Register());
  const test::WarmupBound warmup;
  uint64_t step = 1;
  for (bool ready = false; !ready; ++step) {
    ASSERT_FALSE(warmup.Exhausted(step)) << "no basis activated by step " << step;
    auto results = device.Step(step, false);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    ready = results[0].response.tensors(0).transformed() &&
            results[0].response.tensors(1).transformed();
  }
  // Beyond the BF16 tensor's widen per step, the FP32 device tensor was read
  // through DeviceMemory for its sketches (and the owner's copy when rank 0
  // owns it).
  EXPECT_GT(device.memory().copies_to_host(), step - 1);
  for (int checked = 0; checked < 2; ++checked, ++step) {
    auto results = device.Step(step, checked == 1);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    for (size_t t = 0; t < Tensors().size(); ++t) {
      SCOPED_TRACE(absl::StrCat("step ", step, " ", Tensors()[t].name));
      const auto& on_device = results[0].averages[t];
      const auto& on_host = results[1].averages[t];
      if (t == 0) {
        // Rank 0's inverse ran on the (emulated) device, rank 1's on the CPU.
        EXPECT_TRUE(results[0].response.tensors(0).transformed());
        EXPECT_LE(RelativeError(on_device, on_host), 1e-5);
      } else {
        // Host engines on both ranks (rank 0's BF16 tensor staged through the host).
        EXPECT_TRUE(BitIdentical(on_device, on_host));
      }
      if (checked == 1) {
        const double e0 = results[0].response.tensors(static_cast<int>(t)).rel_l2_error();
        const double e1 = results[1].response.tensors(static_cast<int>(t)).rel_l2_error();
        EXPECT_GT(e0, 0.0);
        EXPECT_NEAR(e0, e1, 1e-5 + 1e-3 * e1);
      }
    }
  }
}

}  // namespace
}  // namespace gift::worker
