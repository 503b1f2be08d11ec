#include "worker/owner/sketch_exchange.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "worker/intake/registered_tensor.h"

namespace gift::worker {
namespace {

const gift::v1::TensorInfo* FindTensor(const gift::v1::ClusterState& state, uint64_t tensor_id) {
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    if (t.tensor_id() == tensor_id) return &t;
  }
  return nullptr;
}

transform::GeometrySource SourceOf(gift::v1::GeometrySource source) {
  switch (source) {
    case gift::v1::GEOMETRY_SOURCE_ACTIVATIONS:
      return transform::GeometrySource::kActivations;
    case gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS:
      return transform::GeometrySource::kPerWorkerGradients;
    case gift::v1::GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER:
      return transform::GeometrySource::kActivationsPerWorker;
    default:
      return transform::GeometrySource::kGradients;
  }
}

// The sides of a tensor's gradient the workers sketch under `t`'s source
// (the layout of its statistics tensor); nullopt for a source without
// per-worker sketches, or one whose sketched side is not transformed.
std::optional<gift::v1::Sides> SketchedSides(const gift::v1::TransformPolicy& t) {
  switch (t.source()) {
    case gift::v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS:
      return t.sides();
    case gift::v1::GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER:  // the output side only
      if (t.sides() == gift::v1::SIDES_INPUT) return std::nullopt;
      return gift::v1::SIDES_OUTPUT;
    default:
      return std::nullopt;
  }
}

// The rounding noise of the per-worker averages under `t`'s statistics
// codec (0 when it does not parse: the policy validated it).
double StatisticsNoise(const gift::v1::TransformPolicy& t) {
  const absl::StatusOr<codec::CodecSpec> spec = codec::FromProto(t.statistics_codec());
  return spec.ok() ? policy::WireNoise(*spec, t.ema_decay()) : 0.0;
}

}  // namespace

int64_t PerWorkerSketchSize(const gift::v1::TransformPolicy& transform) {
  return transform.statistics_columns() != 0 ? transform.statistics_columns()
                                             : policy::kDefaultStatisticsColumns;
}

transform::TensorGeometryOptions GeometryOptionsFor(const policy::TensorSettings& settings,
                                                    uint64_t tensor_id) {
  const transform::GeometrySource source = SourceOf(settings.transform.source());
  return {.sides = static_cast<transform::Sides>(settings.transform.sides()),
          .source = source,
          .ema_decay = settings.transform.ema_decay(),
          .statistics = settings.transform.statistics() == gift::v1::STATISTICS_FORM_EXACT
                            ? transform::StatisticsForm::kExact
                            : transform::StatisticsForm::kSketch,
          // Per-worker sketches: the policy's columns, which fix the
          // statistics tensor; the owner's own sketch of the reduced
          // gradient follows the rank.
          .sketch_size = transform::UsesPerWorkerMoments(source)
                             ? PerWorkerSketchSize(settings.transform)
                             : OwnerSketchSize(settings.transform.rank()),
          .sketch_seed = tensor_id,
          // The averages arrive rounded by the statistics codec.
          .per_worker_noise = StatisticsNoise(settings.transform)};
}

bool UsesPerWorkerSketches(const policy::TensorSettings& settings,
                           absl::Span<const int64_t> shape) {
  return settings.selection != policy::Selection::kDirect && policy::IsTransformable(shape) &&
         SketchedSides(settings.transform).has_value();
}

std::string StatisticsTensorName(const std::string& name, const policy::TensorSettings& settings) {
  // Named by the sides the sketch holds, which fix its layout.
  const gift::v1::Sides sketched =
      SketchedSides(settings.transform).value_or(settings.transform.sides());
  const char* sides = "both";
  if (sketched == gift::v1::SIDES_INPUT) sides = "input";
  if (sketched == gift::v1::SIDES_OUTPUT) sides = "output";
  return policy::StatisticsTensorName(
      name, sides, static_cast<uint32_t>(PerWorkerSketchSize(settings.transform)));
}

SketchExchange::Registrar SketchExchange::RegistrarOf(const control::MemberSession* session) {
  return [session](const gift::v1::TensorSpec& spec) -> absl::StatusOr<uint64_t> {
    auto registered = session->RegisterTensors({spec});
    if (!registered.ok()) return registered.status();
    if (registered->tensors_size() != 1) {
      return absl::InternalError("the coordinator answered for another number of tensors");
    }
    return registered->tensors(0).tensor_id();
  };
}

absl::StatusOr<SketchExchange::Entry*> SketchExchange::EntryFor(
    const gift::v1::TensorInfo& info, const policy::TensorSettings& settings) {
  const std::string key = settings.transform.SerializeAsString();
  Entry& entry = entries_[info.tensor_id()];
  if (entry.geometry != nullptr && entry.key == key) return &entry;
  entry = Entry{};
  auto geometry = transform::TensorGeometry::Create(info.shape(0), info.shape(1),
                                                    GeometryOptionsFor(settings, info.tensor_id()));
  if (!geometry.ok()) {
    entries_.erase(info.tensor_id());
    return geometry.status();
  }
  auto size = geometry->PerWorkerContributionSize();
  if (!size.ok()) {
    entries_.erase(info.tensor_id());
    return size.status();
  }
  const uint64_t rows = policy::StatisticsRows(static_cast<uint64_t>(*size));
  gift::v1::TensorSpec spec;
  spec.set_name(StatisticsTensorName(info.name(), settings));
  spec.add_shape(1);
  spec.add_shape(static_cast<int64_t>(rows));
  spec.add_shape(kStatisticsColumns);
  spec.set_dtype(gift::v1::DTYPE_FLOAT32);
  auto id = registrar_(spec);
  if (!id.ok()) {
    entries_.erase(info.tensor_id());
    return id.status();
  }
  entry.key = key;
  entry.name = spec.name();
  entry.geometry = std::make_unique<transform::TensorGeometry>(*std::move(geometry));
  entry.statistics_tensor_id = *id;
  entry.contribution_size = *size;
  entry.rows = rows;
  entry.buffer.assign(rows * kStatisticsColumns, 0.0f);
  return &entry;
}

absl::StatusOr<std::vector<LocalTensor>> SketchExchange::Prepare(
    const gift::v1::ClusterState& state, uint64_t step, const std::vector<LocalTensor>& tensors,
    const DeviceMemory* memory) {
  const auto start = std::chrono::steady_clock::now();
  for (auto& [id, entry] : entries_) entry.prepared = false;
  last_prepare_seconds_ = 0;
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  std::vector<LocalTensor> out;
  for (const LocalTensor& t : tensors) {
    const gift::v1::TensorInfo* info = FindTensor(state, t.tensor_id);
    if (info == nullptr) continue;
    const std::vector<int64_t> shape(info->shape().begin(), info->shape().end());
    const policy::TensorSettings settings =
        policy::ResolveTensorSettings(policy, info->name(), shape);
    if (!UsesPerWorkerSketches(settings, shape)) continue;
    if (step % std::max<uint32_t>(1, settings.transform.collect_period()) != 0) continue;
    if (t.rows != static_cast<uint64_t>(shape[0]) || t.cols != static_cast<uint64_t>(shape[1])) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.tensor_id, " is ", t.rows, "x",
                                                     t.cols, " here, not as registered"));
    }
    auto entry = EntryFor(*info, settings);
    if (!entry.ok()) {
      return absl::Status(
          entry.status().code(),
          absl::StrCat("statistics of tensor '", info->name(), "': ", entry.status().message()));
    }
    Entry& e = **entry;
    const float* gradient = t.data;
    std::vector<float> host_copy;  // a device tensor's
    if (t.device) {
      if (absl::Status s = ReadTensor(t, memory, &host_copy); !s.ok()) return s;
      gradient = host_copy.data();
    }
    if (auto s = e.geometry->PerWorkerContribution(gradient, e.buffer.data()); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("sketch of tensor '", info->name(), "': ", s.message()));
    }
    std::fill(e.buffer.begin() + e.contribution_size, e.buffer.end(), 0.0f);
    e.prepared = true;
    out.push_back({.tensor_id = e.statistics_tensor_id,
                   .name = e.name,
                   .rows = e.rows,
                   .cols = kStatisticsColumns,
                   .data = e.buffer.data()});
  }
  last_prepare_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void SketchExchange::Forget() {
  for (auto& [id, entry] : entries_) entry.prepared = false;
}

absl::Span<const float> SketchExchange::Average(uint64_t tensor_id) const {
  auto it = entries_.find(tensor_id);
  if (it == entries_.end() || !it->second.prepared) return {};
  return absl::MakeConstSpan(it->second.buffer.data(), it->second.contribution_size);
}

}  // namespace gift::worker
