// The coordinator's cluster state as the data plane reads it, built by one
// function for both of its sides, so that they agree: the worker's step
// planner (worker/plan/step_planner.h: where each chunk goes, the push codec)
// and the aggregator's shard epoch (server/aggregator/shard_epoch_from_
// state.h: the chunks a shard reduces, the pull codec).
//
//   auto view = dataplane::StateViewOf(state);
//   const dataplane::TensorView& t = view->tensors.at(id);
//   t.push_spec, t.pull_spec, t.settings.transform.rotation_block(), t.chunks
//
// What it checks: the shard map is of the state's epoch; every chunk names
// a registered tensor and has a shape in it (ChunkShapeOf); every
// tensor's resolved push and pull codecs are valid.
//
// Ownership: the view points into `state` (TensorInfo, Chunk) and must not
// outlive it. Thread safety: a pure function; a view is plain data.
#ifndef GIFT_COMMON_DATAPLANE_STATE_VIEW_H_
#define GIFT_COMMON_DATAPLANE_STATE_VIEW_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/policy/policy.h"
#include "gift/v1/cluster.pb.h"

namespace gift::dataplane {

struct ChunkView {
  const gift::v1::Chunk* chunk = nullptr;
  ChunkShape shape;  // as encoded: rows x cols of the tensor's 2-D view
};

struct TensorView {
  const gift::v1::TensorInfo* info = nullptr;
  uint64_t elements = 0;  // the product of the shape
  uint64_t cols = 0;      // the last dimension (1 for a scalar)
  // policy::ResolveTensorSettings under the state's policy (with defaults).
  policy::TensorSettings settings;
  codec::CodecSpec push_spec;     // settings' push codec, parsed
  codec::CodecSpec pull_spec;     // settings' pull codec, parsed
  std::vector<ChunkView> chunks;  // in the shard map's order
};

struct StateView {
  uint64_t epoch = 0;
  gift::v1::Policy policy;                            // the state's, with defaults
  absl::flat_hash_map<uint64_t, TensorView> tensors;  // by tensor id
};

// FailedPrecondition: the shard map is of another epoch (not usable yet).
// InvalidArgument: a chunk of an unknown tensor or off whole rows; a
// tensor's resolved codec that is not valid (named with the tensor).
absl::StatusOr<StateView> StateViewOf(const gift::v1::ClusterState& state);

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_STATE_VIEW_H_
