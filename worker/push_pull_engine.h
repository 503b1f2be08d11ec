// The data path of a worker daemon for one step: for each tensor, transform
// (GIFT basis or direct) -> cut into the shard map's chunks -> encode each
// chunk with the push codec -> push it to the chunk's aggregator server ->
// receive the servers' reduced chunks -> decode -> inverse transform ->
// write the average back into the tensor's buffer.
//
//   auto engine = PushPullEngine::Create(make_transport, {});
//   StepPlan plan{.epoch = e, .step = s, .rank = r, .world_size = p, .push_spec = spec,
//                 .tensors = {{.tensor_id = 7, .rows = m, .cols = n, .data = grad,
//                              .transform = basis, .basis_version = 3, .chunks = routes}}};
//   auto report = engine->Run(plan);   // grad now holds the average
//
// Pushes leave as soon as each chunk is encoded, so encoding overlaps the
// transfer of earlier chunks; results are decoded once all have arrived.
// Stochastic rounding is keyed RngKey{tensor = tensor_id << 24 | chunk
// index, step, rank}, so chunks of one tensor draw independent streams.
//
// A step whose epoch a server aborts (a member left) returns Aborted: the
// caller plans the step again under the new epoch and calls Run again; the
// tensor buffers still hold this worker's gradient then (results are
// written only when every chunk has arrived).
//
// Thread safety: Run is not reentrant (one step at a time per engine);
// address() may be called from any thread. Results arrive on the
// transport's progress thread.
#ifndef GIFT_WORKER_PUSH_PULL_ENGINE_H_
#define GIFT_WORKER_PUSH_PULL_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/transform/gradient_transform.h"
#include "common/transport/connection_cache.h"
#include "common/transport/transport.h"

namespace gift::worker {

struct ChunkRoute {
  uint32_t index = 0;
  uint64_t offset = 0;  // first element
  uint64_t num_elements = 0;
  std::string server;  // the aggregator's transport address
};

struct TensorStep {
  uint64_t tensor_id = 0;
  uint64_t rows = 0;  // the 2-D view: product of all dimensions but the last
  uint64_t cols = 0;  // the last dimension
  // In: this worker's gradient; out: the average over the world. Not owned;
  // valid and untouched by others during Run.
  float* data = nullptr;
  // Null: direct quantization. Otherwise its shape must be rows x cols.
  std::shared_ptr<const transform::GradientTransform> transform;
  uint64_t basis_version = 0;
  std::vector<ChunkRoute> chunks;  // must cover the tensor exactly once
};

struct StepPlan {
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  codec::CodecSpec push_spec;
  std::vector<TensorStep> tensors;
};

struct StepReport {
  uint64_t bytes_pushed = 0;  // payload bytes sent
  uint64_t bytes_pulled = 0;  // payload bytes received
  double encode_seconds = 0;  // transform + encode
  double wait_seconds = 0;    // from the last push to the last result
  double decode_seconds = 0;  // decode + inverse transform
};

struct PushPullEngineOptions {
  codec::CodecOptions codec_options = {};  // the pool is not owned
  absl::Duration timeout = absl::Seconds(60);
};

using TransportFactory = std::function<absl::StatusOr<std::unique_ptr<transport::Transport>>(
    transport::TransportHandlers handlers)>;

class PushPullEngine {
 public:
  static absl::StatusOr<std::unique_ptr<PushPullEngine>> Create(
      const TransportFactory& make_transport, const PushPullEngineOptions& options = {});
  ~PushPullEngine();

  // Where servers send results.
  std::string address() const;

  // Runs one step as described above. Errors: InvalidArgument (a bad plan:
  // shapes, chunk coverage, spec), Unavailable (a server cannot be reached),
  // Aborted (a server aborted the step's epoch), DeadlineExceeded (no
  // complete result within the timeout), DataLoss / InvalidArgument (a
  // malformed result). The buffers are written only on success.
  absl::StatusOr<StepReport> Run(const StepPlan& plan);

  // Aborts the step in flight, if its epoch is below `epoch` (Run returns
  // Aborted with `why`): the cluster moved to a new epoch, and servers that
  // switched to it refuse the step's pushes. May be called from any thread;
  // does nothing when no step is in flight.
  void AbortEpochsBefore(uint64_t epoch, absl::string_view why);

  // Messages received that belonged to no step in flight (late, duplicate
  // or foreign), for diagnostics.
  uint64_t stray_messages() const;

 private:
  struct Inflight {
    uint64_t epoch = 0;
    uint64_t step = 0;
    // (tensor id, chunk index) -> slot in `results`.
    absl::flat_hash_map<std::pair<uint64_t, uint32_t>, size_t> slots;
    std::vector<std::vector<uint8_t>> results;
    std::vector<bool> arrived;
    size_t remaining = 0;
    absl::Status aborted;  // non-OK once a server aborted the step
  };

  PushPullEngine(const PushPullEngineOptions& options) : options_(options) {}
  void OnMessage(transport::Message message);
  absl::StatusOr<transport::PeerId> PeerFor(const std::string& address);

  const PushPullEngineOptions options_;
  std::unique_ptr<transport::Transport> transport_;

  mutable absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  Inflight inflight_ ABSL_GUARDED_BY(mu_);
  uint64_t stray_ ABSL_GUARDED_BY(mu_) = 0;
  transport::ConnectionCache connections_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_PUSH_PULL_ENGINE_H_
