#include "server/aggregator/shard_epoch_from_state.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "common/dataplane/chunk_shape.h"
#include "common/policy/policy.h"

namespace gift::server {

absl::StatusOr<ShardEpoch> ShardEpochFromState(const gift::v1::ClusterState& state,
                                               uint32_t shard_id) {
  if (state.workers_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("epoch ", state.epoch(), " has no workers"));
  }
  if (state.shard_map().epoch() != state.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard map of epoch ", state.shard_map().epoch(), " in a state of epoch ", state.epoch()));
  }
  ShardEpoch out{.epoch = state.epoch()};
  out.workers.resize(state.workers_size());
  out.nodes.resize(state.workers_size());
  std::vector<bool> seen(state.workers_size(), false);
  for (const gift::v1::Member& w : state.workers()) {
    if (w.rank() >= static_cast<uint32_t>(state.workers_size()) || seen[w.rank()]) {
      return absl::InvalidArgumentError(absl::StrCat("worker ", w.member_id(), " has rank ",
                                                     w.rank(), " in a world of ",
                                                     state.workers_size()));
    }
    if (w.data_address().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker ", w.member_id(), " has no data-plane address"));
    }
    seen[w.rank()] = true;
    out.workers[w.rank()] = w.data_address();
    out.nodes[w.rank()] = w.node();
  }
  struct Dims {
    uint64_t total = 0;
    uint64_t cols = 0;
  };
  absl::flat_hash_map<uint64_t, Dims> tensors;
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    Dims d{.total = 1, .cols = 1};
    for (int64_t dim : t.shape()) d.total *= static_cast<uint64_t>(dim);
    if (t.shape_size() > 0) d.cols = static_cast<uint64_t>(t.shape(t.shape_size() - 1));
    tensors[t.tensor_id()] = d;
  }
  for (const gift::v1::Chunk& c : state.shard_map().chunks()) {
    if (c.server_rank() != shard_id) continue;
    auto t = tensors.find(c.tensor_id());
    if (t == tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map names unknown tensor ", c.tensor_id()));
    }
    auto shape =
        dataplane::ChunkShapeOf(t->second.total, t->second.cols, c.offset(), c.num_elements());
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", c.tensor_id(), " chunk ", c.index(),
                                                     ": ", shape.status().message()));
    }
    out.chunks[{c.tensor_id(), c.index()}] = *shape;
  }
  if (state.has_policy()) {
    const gift::v1::Policy policy = policy::WithDefaults(state.policy());
    auto pull = codec::FromProto(policy.transform().pull_codec());
    if (!pull.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy pull codec: ", pull.status().message()));
    }
    out.pull_spec = *pull;
    // Each tensor's own, resolved as its workers resolve their push codecs.
    for (const gift::v1::TensorInfo& t : state.tensors()) {
      const policy::TensorSettings settings =
          policy::ResolveTensorSettings(policy, t.name(), t.shape());
      auto spec = codec::FromProto(settings.transform.pull_codec());
      if (!spec.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("policy pull codec of tensor '", t.name(),
                                                       "': ", spec.status().message()));
      }
      out.tensor_pull_specs[t.tensor_id()] = *spec;
    }
  }
  return out;
}

}  // namespace gift::server
