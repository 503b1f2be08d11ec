// Helpers the push-pull engine's files share (push_pull_engine.cc,
// push_pull_engine_results.cc); not part of the engine's interface.
#ifndef GIFT_WORKER_PUSH_PULL_ENGINE_INTERNAL_H_
#define GIFT_WORKER_PUSH_PULL_ENGINE_INTERNAL_H_

#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dataplane/chunk_header.h"
#include "worker/push_pull_engine.h"

namespace gift::worker::engine_internal {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline absl::Status Annotate(const absl::Status& s, uint64_t tensor_id, int64_t chunk = -1) {
  if (s.ok()) return s;
  return absl::Status(s.code(), chunk < 0 ? absl::StrCat("tensor ", tensor_id, ": ", s.message())
                                          : absl::StrCat("tensor ", tensor_id, " chunk ", chunk,
                                                         ": ", s.message()));
}

// The header of this worker's chunk `chunk_index` of `t` in `plan`, of `kind`
// (a push, a node push or a node member's chunk).
inline dataplane::ChunkHeader OwnChunkHeader(dataplane::ChunkKind kind, const StepPlan& plan,
                                             const TensorStep& t, uint32_t chunk_index) {
  return dataplane::ChunkHeader{.kind = kind,
                                .epoch = plan.epoch,
                                .step = plan.step,
                                .tensor_id = t.tensor_id,
                                .basis_version = t.basis_version,
                                .chunk_index = chunk_index,
                                .rank = plan.rank,
                                .world_size = plan.world_size};
}

}  // namespace gift::worker::engine_internal

#endif  // GIFT_WORKER_PUSH_PULL_ENGINE_INTERNAL_H_
