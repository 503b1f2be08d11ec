// A fake aggregator for unit tests of the push-pull engine: it answers an
// in-process engine by hand (results and aborts of tensor 5, sent when the
// test says) and records the engine's pushes.
//
//   HandServer rig;
//   ASSERT_NO_FATAL_FAILURE(rig.SetUp());
//   std::thread run([&] { report = rig.engine().Run(rig.Plan(1, 7, 1, grad)); });
//   ASSERT_TRUE(rig.AwaitPushes(2));
//   rig.Send(dataplane::ChunkKind::kResult, 1, 7, 1, 0, 3.0f);
//
// Thread safety: Send and Plan are the test thread's; the engine runs on
// any. Ownership: the rig owns the hub, the server's transport and the
// engine (destroyed first).
#ifndef GIFT_TESTS_WORKER_HAND_SERVER_H_
#define GIFT_TESTS_WORKER_HAND_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker::testing {

class HandServer {
 public:
  static constexpr uint64_t kCols = 256;  // per chunk; tensor 5 has two chunks
  // Decorates the engine's transport (a test's fault on its sends).
  using TransportWrapper =
      std::function<std::unique_ptr<transport::Transport>(std::unique_ptr<transport::Transport>)>;

  // Starts the server and the engine (whose steps time out after
  // `engine_timeout`; `wrap`, when set, decorates its transport).
  void SetUp(absl::Duration engine_timeout = absl::Seconds(10), TransportWrapper wrap = nullptr) {
    auto server =
        transport::CreateInprocTransport(&hub_, {.on_receive = [this](transport::Message m) {
          auto h = dataplane::ParseChunkHeader(m.header);
          absl::MutexLock lock(&mu_);
          if (h.ok()) pushes_.push_back(*h);
        }});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto engine = PushPullEngine::Create(
        [this, wrap](transport::TransportHandlers h)
            -> absl::StatusOr<std::unique_ptr<transport::Transport>> {
          auto t = transport::CreateInprocTransport(&hub_, std::move(h));
          if (!t.ok() || wrap == nullptr) return t;
          return wrap(*std::move(t));
        },
        {.timeout = engine_timeout});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    auto to_engine = server_->Connect(engine_->address());
    ASSERT_TRUE(to_engine.ok()) << to_engine.status();
    to_engine_ = *to_engine;
    sent_.reserve(64);
  }
  ~HandServer() { engine_.reset(); }

  PushPullEngine& engine() { return *engine_; }
  // The hub the server and the engine are on (for more in-process peers).
  transport::InprocHub& hub() { return hub_; }
  std::string address() const { return server_->address(); }
  // Tensor 5 (1 x 2 kCols, two chunks at this server) over `grad`.
  StepPlan Plan(uint64_t epoch, uint64_t step, uint32_t world, float* grad) const {
    StepPlan plan{.epoch = epoch,
                  .step = step,
                  .world_size = world,
                  .tensors = {{.tensor_id = 5,
                               .rows = 1,
                               .cols = 2 * kCols,
                               .data = grad,
                               .chunks = {{.index = 0, .num_elements = kCols},
                                          {.index = 1, .offset = kCols, .num_elements = kCols}},
                               .push_spec = codec::ParseCodecSpec("e4m3/block32").value()}}};
    plan.tensors[0].chunks[0].server = plan.tensors[0].chunks[1].server = server_->address();
    return plan;
  }
  // A result of chunk `chunk` (every element `value`, bf16) or an abort.
  void Send(dataplane::ChunkKind kind, uint64_t epoch, uint64_t step, uint32_t world,
            uint32_t chunk, float value) {
    if (kind == dataplane::ChunkKind::kResult) {
      std::vector<float> values(kCols, value);
      auto t =
          codec::EncodedTensor::Create(codec::ParseCodecSpec("bf16").value(), 1, kCols).value();
      ASSERT_TRUE(codec::Encode(values.data(), t.mutable_view()).ok());
      const uint64_t dims[] = {1, kCols};
      sent_.push_back(codec::SerializePayload(t.view(), dims).value());
    } else {
      const std::string why = "a new epoch replaced the step's epoch";
      sent_.emplace_back(why.begin(), why.end());
    }
    const auto header = dataplane::SerializeChunkHeader({.kind = kind,
                                                         .epoch = epoch,
                                                         .step = step,
                                                         .tensor_id = 5,
                                                         .chunk_index = chunk,
                                                         .world_size = world});
    ASSERT_TRUE(server_->Send(to_engine_, header, sent_.back(), [](const absl::Status&) {}).ok());
  }
  // Waits up to 10 s until the engine pushed `n` chunks in all.
  bool AwaitPushes(size_t n) {
    absl::MutexLock lock(&mu_);
    auto done = [&] { return pushes_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }

 private:
  transport::InprocHub hub_;
  absl::Mutex mu_;
  std::vector<dataplane::ChunkHeader> pushes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<transport::Transport> server_;
  std::unique_ptr<PushPullEngine> engine_;
  transport::PeerId to_engine_ = 0;
  std::vector<std::vector<uint8_t>> sent_;  // kept until the end: Send does not copy
};

}  // namespace gift::worker::testing

#endif  // GIFT_TESTS_WORKER_HAND_SERVER_H_
