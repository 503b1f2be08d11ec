// Per-worker gradient statistics on the data path: for the tensors whose
// resolved geometry source is GEOMETRY_SOURCE_PER_WORKER_GRADIENTS (or
// GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER, output side only), every
// worker computes, on the tensor's collect steps, the Nystrom sketches of its
// own G_i G_i^T / d_in and G_i^T G_i / d_out (transform::TensorGeometry::
// PerWorkerContribution, moment_sketch.h) and the servers average them like
// a gradient, in FP32; the tensor's basis owner folds the average into its
// EMA (basis_owner.h).
//
// The carrier: each such tensor has a derived *statistics tensor*, an FP32
// tensor the workers register with the coordinator like any other, named
// "<tensor>#sketch.<sides>" (StatisticsTensorName) and shaped
// [1, rows, kStatisticsColumns] with rows * kStatisticsColumns >= the
// contribution size (zero padding). Being 3-D it is never transformable: it
// has no owner and no basis, goes direct, and the shard map cuts it into
// whole-row chunks over the servers like a gradient. The daemon exchanges
// the statistics tensors of a step separately from the step's gradients (own
// step key; pushed and pulled in the policy's transform.statistics_codec,
// BF16 by default: common/policy/statistics_tensor.h, worker/daemon/
// step_exchange.h, step_sketches.h); every
// worker of the epoch receives the average (the servers broadcast every
// result), and only the owner uses it.
//
// Same test matrices everywhere: the sketch seeds derive from the tensor id
// (GeometryOptionsFor), fixed across steps, because an EMA of sketches is the
// sketch of the EMA only for a fixed test matrix.
//
//   SketchExchange sketches([&](const gift::v1::TensorSpec& s) { ... register ... });
//   auto stats = sketches.Prepare(*state, step, tensors);   // before the exchange
//   ... exchange *stats (direct; in the statistics codec on the wire) ...
//   absl::Span<const float> avg = sketches.Average(tensor_id);
//
// Ownership: owns the statistics buffers (LocalTensor::data of Prepare's
// result points into them until the next Prepare). Thread safety:
// thread-compatible (the daemon calls it under its step lock).
#ifndef GIFT_WORKER_OWNER_SKETCH_EXCHANGE_H_
#define GIFT_WORKER_OWNER_SKETCH_EXCHANGE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/control/member_session.h"
#include "common/policy/policy.h"
#include "common/policy/statistics_tensor.h"
#include "common/transform/tensor_geometry.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"
#include "worker/intake/device_memory.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {

using policy::kStatisticsColumns;

// Columns of each side's per-worker sketch of a tensor with resolved
// `transform` settings: transform.statistics_columns (the policy's default
// when unset). Every worker and the owner resolve the same number; the
// statistics tensor's size and name follow from it.
int64_t PerWorkerSketchSize(const gift::v1::TransformPolicy& transform);

// Columns of the owner's sketch of the reduced gradient at `rank`: 1.5 x
// rank, at least 32 (docs/fidelity.md "Sketched statistics": at rank 64 on
// the d_model 512 set 80, 96 and 128 columns all kept the exact statistics'
// ratio to direct within 0.005).
inline int64_t OwnerSketchSize(int64_t rank) { return std::max<int64_t>(32, rank + rank / 2); }

// The statistics options of a tensor with resolved `settings`, identical on
// every worker and the owner (sources, sides, decay, statistics form, sketch
// size: PerWorkerSketchSize for per-worker sketches, OwnerSketchSize for
// the owner's sketch of the reduced gradient; seed).
transform::TensorGeometryOptions GeometryOptionsFor(const policy::TensorSettings& settings,
                                                    uint64_t tensor_id);

// Whether a tensor of `shape` with resolved `settings` takes per-worker
// sketches: transformable, not direct by policy, per-worker source.
bool UsesPerWorkerSketches(const policy::TensorSettings& settings, absl::Span<const int64_t> shape);

// "<name>#sketch.both" (or .input / .output; with ".k<columns>" after it for
// sketches of other than the default columns, policy::StatisticsTensorName).
std::string StatisticsTensorName(const std::string& name, const policy::TensorSettings& settings);

class SketchExchange {
 public:
  // Registers a statistics tensor with the coordinator (idempotent per name)
  // and returns its tensor id.
  using Registrar = std::function<absl::StatusOr<uint64_t>(const gift::v1::TensorSpec& spec)>;

  // Registers through `session` (RegisterTensors), which must outlive it.
  static Registrar RegistrarOf(const control::MemberSession* session);

  explicit SketchExchange(Registrar registrar) : registrar_(std::move(registrar)) {}

  // The statistics tensors of `step` for `tensors` (their data: this
  // worker's gradient, read here), one per tensor that uses per-worker
  // sketches in `state` and collects at `step`, each holding this worker's
  // contribution; empty when none does. Registers statistics tensors the
  // first time. Errors: the registrar's, and InvalidArgument for a
  // non-finite gradient (nothing is exchanged for the step then). A device
  // tensor (LocalTensor::device) is sketched from a host copy made through
  // `memory` (registered_tensor.h ReadTensor; its errors), only when it is
  // sketched at this step.
  absl::StatusOr<std::vector<LocalTensor>> Prepare(const gift::v1::ClusterState& state,
                                                   uint64_t step,
                                                   const std::vector<LocalTensor>& tensors,
                                                   const DeviceMemory* memory = nullptr);

  // After the exchange of Prepare's tensors: the average contribution for
  // the gradient tensor `tensor_id` (PerWorkerContributionSize floats), or
  // an empty span when Prepare gave none for it.
  absl::Span<const float> Average(uint64_t tensor_id) const;

  // Drops the last Prepare's contributions (their exchange failed): Average
  // is empty for every tensor until the next Prepare.
  void Forget();

  // Seconds spent computing contributions by the last Prepare.
  double last_prepare_seconds() const { return last_prepare_seconds_; }

 private:
  struct Entry {
    std::string key;   // the resolved settings the entry was built for
    std::string name;  // the statistics tensor's (StatisticsTensorName)
    std::unique_ptr<transform::TensorGeometry> geometry;
    uint64_t statistics_tensor_id = 0;
    int64_t contribution_size = 0;
    uint64_t rows = 0;
    std::vector<float> buffer;  // rows * kStatisticsColumns
    bool prepared = false;      // by the last Prepare
  };
  absl::StatusOr<Entry*> EntryFor(const gift::v1::TensorInfo& info,
                                  const policy::TensorSettings& settings);

  const Registrar registrar_;
  absl::flat_hash_map<uint64_t, Entry> entries_;  // by gradient tensor id
  double last_prepare_seconds_ = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_OWNER_SKETCH_EXCHANGE_H_
