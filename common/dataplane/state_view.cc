#include "common/dataplane/state_view.h"

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"

namespace gift::dataplane {
namespace {

absl::StatusOr<codec::CodecSpec> TensorCodec(const gift::v1::CodecSpec& proto,
                                             absl::string_view which,
                                             const gift::v1::TensorInfo& t) {
  auto spec = codec::FromProto(proto);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy ", which, " codec of tensor '", t.name(),
                                                   "': ", spec.status().message()));
  }
  return spec;
}

}  // namespace

absl::StatusOr<StateView> StateViewOf(const gift::v1::ClusterState& state) {
  if (state.shard_map().epoch() != state.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard map of epoch ", state.shard_map().epoch(), " in a state of epoch ", state.epoch()));
  }
  StateView view{.epoch = state.epoch(), .policy = policy::WithDefaults(state.policy())};
  view.tensors.reserve(state.tensors_size());
  for (const gift::v1::TensorInfo& t : state.tensors()) {
    TensorView tv{.info = &t, .elements = 1, .cols = 1};
    for (int64_t dim : t.shape()) tv.elements *= static_cast<uint64_t>(dim);
    if (t.shape_size() > 0) tv.cols = static_cast<uint64_t>(t.shape(t.shape_size() - 1));
    tv.settings = policy::ResolveTensorSettings(view.policy, t.name(), t.shape());
    auto push = TensorCodec(tv.settings.transform.push_codec(), "push", t);
    if (!push.ok()) return push.status();
    auto pull = TensorCodec(tv.settings.transform.pull_codec(), "pull", t);
    if (!pull.ok()) return pull.status();
    tv.push_spec = *push;
    tv.pull_spec = *pull;
    view.tensors[t.tensor_id()] = std::move(tv);
  }
  for (const gift::v1::Chunk& c : state.shard_map().chunks()) {
    auto t = view.tensors.find(c.tensor_id());
    if (t == view.tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map names unknown tensor ", c.tensor_id()));
    }
    auto shape = ChunkShapeOf(t->second.elements, t->second.cols, c.offset(), c.num_elements());
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", c.tensor_id(), " chunk ", c.index(),
                                                     ": ", shape.status().message()));
    }
    t->second.chunks.push_back({.chunk = &c, .shape = *shape});
  }
  return view;
}

}  // namespace gift::dataplane
