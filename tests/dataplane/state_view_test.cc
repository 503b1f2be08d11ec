// The cluster state as the data plane reads it (common/dataplane/state_view.h):
// both sides get each tensor's codecs from one resolution, and a state that is
// not usable or not consistent is refused.
#include "common/dataplane/state_view.h"

#include "common/codec/codec_spec_proto.h"
#include "gtest/gtest.h"

namespace gift::dataplane {
namespace {

gift::v1::ClusterState State() {
  gift::v1::ClusterState s;
  s.set_epoch(5);
  auto add_tensor = [&](uint64_t id, const char* name, std::initializer_list<int64_t> shape) {
    auto* t = s.add_tensors();
    t->set_tensor_id(id);
    t->set_name(name);
    int64_t n = 1;
    for (int64_t d : shape) {
      t->add_shape(d);
      n *= d;
    }
    t->set_num_elements(n);
  };
  add_tensor(3, "layers.0.mlp.up", {10, 100});
  add_tensor(4, "layers.0.norm", {100});
  s.mutable_shard_map()->set_epoch(5);
  auto add_chunk = [&](uint64_t tensor, uint32_t index, uint64_t offset, uint64_t n) {
    auto* c = s.mutable_shard_map()->add_chunks();
    c->set_tensor_id(tensor);
    c->set_index(index);
    c->set_offset(offset);
    c->set_num_elements(n);
    c->set_server_rank(index % 2);
  };
  add_chunk(3, 0, 0, 400);
  add_chunk(3, 1, 400, 600);
  add_chunk(4, 0, 0, 100);
  return s;
}

const codec::CodecSpec kNvfp4{
    .format = codec::Format::kNvfp4, .scaling = codec::Scaling::kNvfp4, .block_size = 16};

TEST(StateViewTest, TensorsWithTheirChunksShapesAndResolvedCodecs) {
  gift::v1::ClusterState s = State();
  auto* o = s.mutable_policy()->add_overrides();
  o->set_glob("*.mlp.*");
  *o->mutable_push_codec() = codec::ToProto(kNvfp4);
  auto view = StateViewOf(s);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->epoch, 5u);
  ASSERT_EQ(view->tensors.size(), 2u);
  const TensorView& up = view->tensors.at(3);
  EXPECT_EQ(up.info->name(), "layers.0.mlp.up");
  EXPECT_EQ(up.elements, 1000u);
  EXPECT_EQ(up.cols, 100u);
  ASSERT_EQ(up.chunks.size(), 2u);
  EXPECT_EQ(up.chunks[0].chunk->index(), 0u);
  EXPECT_EQ(up.chunks[0].shape, (ChunkShape{4, 100}));
  EXPECT_EQ(up.chunks[1].shape, (ChunkShape{6, 100}));
  // The override's push codec for the matching tensor only; both codecs are
  // exactly what policy::ResolveTensorSettings says for each tensor.
  EXPECT_EQ(up.push_spec, kNvfp4);
  for (const auto& [id, t] : view->tensors) {
    const policy::TensorSettings settings =
        policy::ResolveTensorSettings(view->policy, t.info->name(), t.info->shape());
    EXPECT_EQ(t.push_spec, *codec::FromProto(settings.transform.push_codec())) << id;
    EXPECT_EQ(t.pull_spec, *codec::FromProto(settings.transform.pull_codec())) << id;
  }
  EXPECT_NE(view->tensors.at(4).push_spec, kNvfp4);
  EXPECT_EQ(view->tensors.at(4).cols, 100u);
}

TEST(StateViewTest, NotReadyOrInconsistentStatesAreRefused) {
  gift::v1::ClusterState s = State();
  s.mutable_shard_map()->set_epoch(4);
  EXPECT_EQ(StateViewOf(s).status().code(), absl::StatusCode::kFailedPrecondition);
  s = State();
  s.mutable_shard_map()->mutable_chunks(0)->set_tensor_id(99);
  EXPECT_EQ(StateViewOf(s).status().code(), absl::StatusCode::kInvalidArgument);
  s = State();
  s.mutable_shard_map()->mutable_chunks(0)->set_num_elements(450);  // crosses a row
  EXPECT_EQ(StateViewOf(s).status().code(), absl::StatusCode::kInvalidArgument);
  s = State();
  auto* o = s.mutable_policy()->add_overrides();
  o->set_glob("layers.0.norm");
  o->mutable_pull_codec()->set_format(gift::v1::ELEMENT_FORMAT_NVFP4);  // no scaling
  auto refused = StateViewOf(s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("layers.0.norm"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace gift::dataplane
