// Device tensors end to end, on a GPU: a local cluster of real processes on
// loopback (gift-coordinator, two gift-server shards, two gift-worker
// daemons; tests/testing/test_cluster.h). This test process is the training
// process of both workers: per worker it cudaMallocs one allocation holding
// two 2-D FP32 gradients (the second at an offset from the allocation's
// base), describes them with DescribeDeviceBuffer
// (worker/client/cuda_device_buffer.h) and registers them by CUDA IPC
// through the C++ client, in the same RegisterBuffers call as a host (shared
// memory) 1-D tensor. Each worker daemon is a separate process that opens
// the handles. Steps of e4m3/block128 both ways, direct and in a GIFT basis:
// every worker's averages are bit-identical, and within the codecs' bound
// of the exact FP32 average computed here (as codec_cluster_test.cc checks).
// Without a device every test skips with the reason.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "gtest/gtest.h"
#include "kernels/cuda_status.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/warmup_bound.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/cuda_device_buffer.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 2;
constexpr int kServers = 2;
constexpr char kCodec[] = "e4m3/block128";

// Tensors 0 and 1 in device memory, 2 on the host (bf16 both ways).
const std::vector<client::TensorSpec>& Specs() {
  static const auto* specs =
      new std::vector<client::TensorSpec>{{"layers.0.attn.q.weight", {96, 64}},
                                          {"layers.0.mlp.up.weight", {160, 64}},
                                          {"layers.0.norm.weight", {512}}};
  return *specs;
}
constexpr size_t kDeviceTensors = 2;
constexpr size_t kNorm = 2;
// Device tensor i's offset in its worker's allocation: not at the base.
constexpr size_t kSecondOffset = 96 * 64 * sizeof(float) + 512;

size_t Elements(const client::TensorSpec& t) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  return n;
}

// The build tree holding the daemons: $GIFT_BUILD_DIR when set (the GPU
// bundle's run.sh points it at the daemons it packed), else this build's.
std::string DaemonsDir() {
  const char* dir = std::getenv("GIFT_BUILD_DIR");
  return dir != nullptr && *dir != '\0' ? dir : GIFT_BUILD_DIR;
}

bool HaveDevice() { return kernels::CudaDeviceAvailable(); }

// Anisotropic gradients: columns scaled over three orders of magnitude.
std::vector<float> Gradient(size_t i, uint64_t step, int worker) {
  const client::TensorSpec& t = Specs()[i];
  std::vector<float> g(Elements(t));
  std::mt19937 rng(static_cast<uint32_t>(step * 1000 + worker * 31 + i));
  std::normal_distribution<float> normal;
  const int64_t cols = t.shape.back();
  for (size_t k = 0; k < g.size(); ++k) {
    const double scale = std::pow(10.0, -3.0 * static_cast<double>(k % cols) / cols);
    g[k] = static_cast<float>(normal(rng) * scale);
  }
  return g;
}

// The bound on the relative L2 error of push + pull (codec_cluster_test.cc).
double Bound(const std::string& push, const std::string& pull) {
  const codec::CodecSpec a = codec::ParseCodecSpec(push).value();
  const codec::CodecSpec b = codec::ParseCodecSpec(pull).value();
  return codec::ElementErrorBound(a.format, a.rounding, 1.0, 1.0) +
         codec::ElementErrorBound(b.format, b.rounding, 1.0, 1.0);
}

double RelError(const std::vector<float>& got, const std::vector<double>& exact) {
  double err = 0, norm = 0;
  for (size_t k = 0; k < exact.size(); ++k) {
    err += (got[k] - exact[k]) * (got[k] - exact[k]);
    norm += exact[k] * exact[k];
  }
  return std::sqrt(err / norm);
}

// One worker's training side: its client, its device allocation and the
// registered tensors.
struct Trainer {
  std::unique_ptr<client::WorkerClient> client;
  void* allocation = nullptr;
  client::RegisteredTensors tensors;
  Trainer() = default;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  ~Trainer() {
    client.reset();
    if (allocation != nullptr) (void)cudaFree(allocation);
  }
};

class DeviceTensorClusterTest : public test::ClusterFixture<::testing::TestWithParam<bool>> {
 protected:
  tools::LocalClusterOptions Options() override {
    return test::ShortLeaseOptions(kServers, kWorkers);
  }
  std::string BuildDir() const override { return DaemonsDir(); }

  void SetUp() override {
    if (!HaveDevice()) {
      GTEST_SKIP() << "no CUDA device: device tensors need one";
    }
    test::ClusterFixture<::testing::TestWithParam<bool>>::SetUp();
  }

  // The workers end (closing their IPC mappings) before the allocations
  // they map are freed: the exporter keeps an allocation alive while it is
  // registered.
  void TearDown() override {
    test::ClusterFixture<::testing::TestWithParam<bool>>::TearDown();
    trainers_.clear();
  }

  void SetGiftPolicy(bool gift) {
    gift::v1::Policy policy;
    *policy.mutable_transform()->mutable_push_codec() =
        codec::ToProto(codec::ParseCodecSpec(kCodec).value());
    *policy.mutable_transform()->mutable_pull_codec() =
        codec::ToProto(codec::ParseCodecSpec(kCodec).value());
    policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
    if (gift) {
      policy.mutable_selection()->add_include("*");  // every 2-D tensor, always
    } else {
      policy.mutable_selection()->add_exclude("*");
    }
    SetPolicy(policy);
  }

  // Connects, allocates and registers on every worker (concurrently: a
  // worker's Register returns once every worker registered).
  void Register() {
    for (int w = 0; w < kWorkers; ++w) trainers_.push_back(std::make_unique<Trainer>());
    std::vector<std::future<absl::Status>> calls;
    for (int w = 0; w < kWorkers; ++w) {
      calls.push_back(std::async(std::launch::async, [this, w]() -> absl::Status {
        Trainer& t = *trainers_[w];
        auto client = client::WorkerClient::Connect(cluster_->worker_socket(w));
        if (!client.ok()) return client.status();
        t.client = *std::move(client);
        auto info = t.client->Info();
        if (!info.ok()) return info.status();
        if (info->cuda_device_count() < 1) {
          return absl::FailedPreconditionError(
              absl::StrCat("worker ", w, " reports cuda_device_count ", info->cuda_device_count(),
                           " on a machine with a device"));
        }
        const size_t second_bytes = Elements(Specs()[1]) * sizeof(float);
        if (cudaMalloc(&t.allocation, kSecondOffset + second_bytes) != cudaSuccess) {
          return absl::InternalError("cudaMalloc failed");
        }
        std::vector<client::DeviceTensorSpec> device;
        for (size_t i = 0; i < kDeviceTensors; ++i) {
          char* at = static_cast<char*>(t.allocation) + (i == 0 ? 0 : kSecondOffset);
          auto b = client::DescribeDeviceBuffer(at, Elements(Specs()[i]) * sizeof(float));
          if (!b.ok()) return b.status();
          device.push_back({Specs()[i].name, Specs()[i].shape, gift::v1::DTYPE_FLOAT32, *b});
        }
        auto set = t.client->Register({Specs()[kNorm]}, device);
        if (!set.ok()) {
          return absl::Status(set.status().code(),
                              absl::StrCat("worker ", w, ": ", set.status().message()));
        }
        t.tensors = *std::move(set);
        return absl::OkStatus();
      }));
    }
    for (auto& c : calls) {
      const absl::Status s = c.get();
      ASSERT_TRUE(s.ok()) << s << "\n" << Logs();
    }
    ASSERT_EQ(trainers_[0]->tensors.device[1].buffer().offset_bytes, kSecondOffset);
  }

  // One step on every worker: the gradients in, the averages out
  // (got[w][i]); exact[i] is the FP32 average (in double).
  std::vector<client::PushPullResult> Step(uint64_t step,
                                           std::vector<std::vector<std::vector<float>>>& got,
                                           std::vector<std::vector<double>>& exact) {
    exact.assign(Specs().size(), {});
    for (size_t i = 0; i < Specs().size(); ++i) {
      exact[i].assign(Elements(Specs()[i]), 0.0);
      for (int w = 0; w < kWorkers; ++w) {
        const std::vector<float> g = Gradient(i, step, w);
        for (size_t k = 0; k < g.size(); ++k) exact[i][k] += double(g[k]) / kWorkers;
        Trainer& t = *trainers_[w];
        if (i < kDeviceTensors) {
          // A synchronous copy: the writes are complete before PushPull.
          EXPECT_EQ(cudaMemcpy(t.tensors.device[i].device_address(), g.data(),
                               g.size() * sizeof(float), cudaMemcpyHostToDevice),
                    cudaSuccess);
        } else {
          std::memcpy(t.tensors.host[0].data(), g.data(), g.size() * sizeof(float));
        }
      }
    }
    std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
    for (int w = 0; w < kWorkers; ++w) calls.push_back(trainers_[w]->client->PushPullAsync(step));
    std::vector<client::PushPullResult> out;
    for (auto& c : calls) {
      auto r = c.get();
      EXPECT_TRUE(r.ok()) << r.status() << Logs();
      if (r.ok()) out.push_back(*std::move(r));
    }
    // The worker's writes are complete when PushPull returns.
    got.assign(kWorkers, std::vector<std::vector<float>>(Specs().size()));
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Specs().size(); ++i) {
        std::vector<float>& v = got[w][i];
        v.resize(Elements(Specs()[i]));
        if (i < kDeviceTensors) {
          EXPECT_EQ(cudaMemcpy(v.data(), trainers_[w]->tensors.device[i].device_address(),
                               v.size() * sizeof(float), cudaMemcpyDeviceToHost),
                    cudaSuccess);
        } else {
          std::memcpy(v.data(), trainers_[w]->tensors.host[0].data(), v.size() * sizeof(float));
        }
      }
    }
    return out;
  }

  std::vector<std::unique_ptr<Trainer>> trainers_;
};

TEST_P(DeviceTensorClusterTest, DeviceAveragesAreBitIdenticalAndWithinTheCodecBound) {
  const bool gift = GetParam();
  SetGiftPolicy(gift);
  Register();
  if (HasFatalFailure()) return;

  // GIFT: step until both 2-D tensors run in their basis.
  constexpr int kChecked = 3;
  const test::WarmupBound warmup;
  std::vector<std::vector<std::vector<float>>> got;
  std::vector<std::vector<double>> exact;
  uint64_t step = 0;
  for (bool ready = !gift; !ready; ++step) {
    ASSERT_FALSE(warmup.Exhausted(step)) << "no basis activated by step " << step << "\n" << Logs();
    auto results = Step(step, got, exact);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    ready = true;
    for (const client::TensorResult& t : results[0].tensors) {
      if (t.name != Specs()[kNorm].name) ready = ready && t.transformed;
    }
  }
  const double bound_2d = Bound(kCodec, kCodec);
  const double bound_1d = Bound("bf16", "bf16");
  for (int k = 0; k < kChecked; ++k, ++step) {
    auto results = Step(step, got, exact);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    for (size_t i = 0; i < Specs().size(); ++i) {
      ASSERT_EQ(std::memcmp(got[1][i].data(), got[0][i].data(), got[0][i].size() * sizeof(float)),
                0)
          << "step " << step << " tensor " << Specs()[i].name << ": workers differ";
      const double err = RelError(got[0][i], exact[i]);
      const double bound = i == kNorm ? bound_1d : bound_2d;
      EXPECT_LT(err, bound) << Specs()[i].name << " step " << step;
      for (const client::TensorResult& r : results[0].tensors) {
        if (r.name == Specs()[i].name) {
          EXPECT_EQ(r.transformed, gift && i != kNorm) << r.name;
        }
      }
      if (k == kChecked - 1) {
        std::printf("%s %s %-24s rel. L2 error %.3e, bound %.3e (%.2f of it)\n",
                    gift ? "gift  " : "direct", i < kDeviceTensors ? "device" : "host  ",
                    Specs()[i].name.c_str(), err, bound, err / bound);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(E4m3, DeviceTensorClusterTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("gift") : std::string("direct");
                         });

}  // namespace
}  // namespace gift::worker
