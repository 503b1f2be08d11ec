// The engine tests' rig: aggregator shards and push-pull engines on one
// transport (an in-process hub of the rig's own, or UCX over loopback), and
// the shards' epochs installed from the chunk routes the engines' plans use.
//
//   testing::EngineRig rig;
//   ASSERT_TRUE(rig.Start({.servers = 2, .workers = 2, .pull = bf16}).ok());
//   ASSERT_TRUE(rig.SetEpoch(1, rig.OnServers(kTensors)).ok());
//   ... plans for rig.engines[r] with testing::Routes(t, rig.servers) ...
//   auto reports = rig.Run(plans);
//
// Ownership: owns the hub, the shards and the engines (the hub outlives
// both). Thread safety: one test thread, but Run (each engine on a thread of
// its own).
#ifndef GIFT_TESTS_WORKER_ENGINE_RIG_H_
#define GIFT_TESTS_WORKER_ENGINE_RIG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transport/inproc/inproc_transport.h"
#include "common/transport/ucx/ucx_transport.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/worker/engine_test_util.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker::testing {

// A tensor of the epoch and the routes of its chunks.
struct RoutedTensor {
  Tensor tensor;
  std::vector<ChunkRoute> routes;
};

class EngineRig {
 public:
  struct Options {
    int servers = 1;
    uint32_t workers = 2;
    codec::CodecSpec pull = {.format = codec::Format::kF32, .scaling = codec::Scaling::kNone};
    bool ucx = false;  // UCX over loopback; else the in-process transport
    absl::Duration timeout = absl::Seconds(20);
    // The device stages of rank r's engine (unset: none for any rank).
    std::function<DeviceStageFactory(uint32_t rank)> device_stages;
  };

  EngineRig() = default;
  EngineRig(const EngineRig&) = delete;
  EngineRig& operator=(const EngineRig&) = delete;
  ~EngineRig() {
    engines.clear();  // before the shards they push to, both before the hub
    shards.clear();
  }

  absl::Status Start(const Options& options) {
    ucx_ = options.ucx;
    for (int s = 0; s < options.servers; ++s) {
      auto shard =
          server::AggregatorShard::Create({.reducer = {.pull_spec = options.pull}}, Factory());
      if (!shard.ok()) return shard.status();
      servers.push_back((*shard)->address());
      shards.push_back(*std::move(shard));
    }
    for (uint32_t r = 0; r < options.workers; ++r) {
      auto engine = PushPullEngine::Create(
          Factory(), {.timeout = options.timeout,
                      .device_stages = options.device_stages ? options.device_stages(r) : nullptr});
      if (!engine.ok()) return engine.status();
      engines.push_back(*std::move(engine));
    }
    return absl::OkStatus();
  }

  // The rig's transport, for more engines or shards.
  transport::TransportFactory Factory() {
    return [this](transport::TransportHandlers h)
               -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
      if (ucx_) return transport::CreateUcxTransport(std::move(h));
      return transport::CreateInprocTransport(&hub_, std::move(h));
    };
  }

  // `tensors` with their chunks routed as testing::Routes over the servers.
  std::vector<RoutedTensor> OnServers(const std::vector<Tensor>& tensors) const {
    std::vector<RoutedTensor> out;
    for (const Tensor& t : tensors) out.push_back({t, Routes(t, servers)});
    return out;
  }

  // Installs `epoch` on shard `s`: the first `world` engines (0: all) as its
  // workers, and the chunks of `tensors` routed to it.
  absl::Status SetEpoch(int s, uint64_t epoch, const std::vector<RoutedTensor>& tensors,
                        uint32_t world = 0) {
    server::ShardEpoch e{.epoch = epoch};
    if (world == 0) world = static_cast<uint32_t>(engines.size());
    for (uint32_t r = 0; r < world; ++r) e.workers.push_back(engines[r]->address());
    for (const RoutedTensor& rt : tensors) {
      const Tensor& t = rt.tensor;
      for (const ChunkRoute& c : rt.routes) {
        if (c.server != servers[s]) continue;
        auto shape = dataplane::ChunkShapeOf(t.rows * t.cols, t.cols, c.offset, c.num_elements);
        if (!shape.ok()) return shape.status();
        e.chunks[{t.id, c.index}] = *shape;
      }
    }
    return shards[s]->SetEpoch(e);
  }
  // The same on every shard.
  absl::Status SetEpoch(uint64_t epoch, const std::vector<RoutedTensor>& tensors,
                        uint32_t world = 0) {
    for (size_t s = 0; s < shards.size(); ++s) {
      if (auto status = SetEpoch(static_cast<int>(s), epoch, tensors, world); !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  // Runs plans[r] on engines[r], each on a thread of its own.
  std::vector<absl::StatusOr<StepReport>> Run(const std::vector<StepPlan>& plans) {
    std::vector<absl::StatusOr<StepReport>> reports(plans.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t r = 0; r < plans.size(); ++r) {
      threads.emplace_back([&, r] { reports[r] = engines[r]->Run(plans[r]); });
    }
    for (auto& t : threads) t.join();
    return reports;
  }

  std::vector<std::unique_ptr<server::AggregatorShard>> shards;
  std::vector<std::string> servers;  // the shards' addresses, by shard
  std::vector<std::unique_ptr<PushPullEngine>> engines;

 private:
  transport::InprocHub hub_;  // outlives them: the destructor ends them first
  bool ucx_ = false;
};

}  // namespace gift::worker::testing

#endif  // GIFT_TESTS_WORKER_ENGINE_RIG_H_
