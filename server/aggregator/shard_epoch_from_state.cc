#include "server/aggregator/shard_epoch_from_state.h"

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "common/dataplane/state_view.h"

namespace gift::server {

absl::StatusOr<ShardEpoch> ShardEpochFromState(const gift::v1::ClusterState& state,
                                               uint32_t shard_id) {
  if (state.workers_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("epoch ", state.epoch(), " has no workers"));
  }
  auto view = dataplane::StateViewOf(state);
  if (!view.ok()) return view.status();
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
  for (const auto& [tensor_id, t] : view->tensors) {
    for (const dataplane::ChunkView& c : t.chunks) {
      if (c.chunk->server_rank() == shard_id) out.chunks[{tensor_id, c.chunk->index()}] = c.shape;
    }
  }
  if (state.has_policy()) {
    auto pull = codec::FromProto(view->policy.transform().pull_codec());
    if (!pull.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy pull codec: ", pull.status().message()));
    }
    out.pull_spec = *pull;
    // Each tensor's own, resolved as its workers resolve their push codecs.
    for (const auto& [tensor_id, t] : view->tensors) out.tensor_pull_specs[tensor_id] = t.pull_spec;
  }
  // The owners' codec choices (fidelity target), version by version.
  for (const gift::v1::TensorBasisState& b : state.bases()) {
    auto add = [&](uint64_t version, const gift::v1::CodecSpec& proto) -> absl::Status {
      if (proto.format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) return absl::OkStatus();
      auto spec = codec::FromProto(proto);
      if (!spec.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", b.tensor_id(), " version ",
                                                       version,
                                                       " pull codec: ", spec.status().message()));
      }
      out.version_pull_specs[{b.tensor_id(), version}] = *spec;
      return absl::OkStatus();
    };
    for (const gift::v1::BasisVersion& v : b.versions()) {
      if (auto s = add(v.version(), v.pull_codec()); !s.ok()) return s;
    }
    if (b.has_proposal()) {
      if (auto s = add(b.proposal().version(), b.proposal().pull_codec()); !s.ok()) return s;
    }
  }
  return out;
}

}  // namespace gift::server
