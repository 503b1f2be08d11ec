#include "server/aggregator/shard_epoch_from_state.h"

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "gtest/gtest.h"

namespace gift::server {
namespace {

gift::v1::ClusterState State() {
  gift::v1::ClusterState s;
  s.set_epoch(5);
  for (uint32_t r : {1u, 0u}) {
    auto* w = s.add_workers();
    w->set_member_id(absl::StrCat("w", r));
    w->set_rank(r);
    w->set_data_address(absl::StrCat("addr-", r));
  }
  auto* t = s.add_tensors();
  t->set_tensor_id(3);
  t->add_shape(10);
  t->add_shape(100);
  t->set_num_elements(1000);
  s.mutable_shard_map()->set_epoch(5);
  for (uint32_t i = 0; i < 3; ++i) {
    auto* c = s.mutable_shard_map()->add_chunks();
    c->set_tensor_id(3);
    c->set_index(i);
    c->set_offset(i * 400);
    c->set_num_elements(i == 2 ? 200 : 400);
    c->set_server_rank(i % 2);
  }
  return s;
}

TEST(ShardEpochFromStateTest, WorkersByRankAndThisShardsChunks) {
  auto e = ShardEpochFromState(State(), 0);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->epoch, 5u);
  EXPECT_EQ(e->workers, (std::vector<std::string>{"addr-0", "addr-1"}));
  ASSERT_EQ(e->chunks.size(), 2u);
  EXPECT_EQ(e->chunks.at({3, 0}), (ChunkShape{4, 100}));
  EXPECT_EQ(e->chunks.at({3, 2}), (ChunkShape{2, 100}));
  EXPECT_EQ(ShardEpochFromState(State(), 1)->chunks.size(), 1u);
}

TEST(ShardEpochFromStateTest, NotReadyOrInconsistentStates) {
  gift::v1::ClusterState s = State();
  s.mutable_shard_map()->set_epoch(4);
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  s = State();
  s.clear_workers();
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  s = State();
  s.mutable_workers(0)->set_rank(0);  // two rank-0 workers
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
  s = State();
  s.mutable_workers(1)->clear_data_address();
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
  s = State();
  s.mutable_shard_map()->mutable_chunks(0)->set_tensor_id(9);
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
  s = State();
  s.mutable_shard_map()->mutable_chunks(0)->set_num_elements(450);  // crosses a row
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

gift::v1::CodecSpec Codec(const char* text) {
  return codec::ToProto(codec::ParseCodecSpec(text).value());
}

// The pull codec of each tensor, resolved as the workers resolve their push
// codecs: the policy's for a 2-D tensor, bf16 for a 1-D one, an override's
// where one matches.
TEST(ShardEpochFromStateTest, PullCodecPerTensor) {
  gift::v1::ClusterState s = State();
  auto* t = s.add_tensors();
  t->set_tensor_id(4);
  t->set_name("norm");
  t->add_shape(64);
  t->set_num_elements(64);
  s.mutable_tensors(0)->set_name("w");
  *s.mutable_policy()->mutable_transform()->mutable_pull_codec() = Codec("e4m3/block128");
  auto e = ShardEpochFromState(s, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->pull_spec, codec::ParseCodecSpec("e4m3/block128").value());
  EXPECT_EQ(codec::ToString(e->tensor_pull_specs.at(3)), "e4m3/block128");
  EXPECT_EQ(codec::ToString(e->tensor_pull_specs.at(4)), "bf16");

  auto* o = s.mutable_policy()->add_overrides();
  o->set_glob("w");
  *o->mutable_pull_codec() = Codec("nvfp4");
  e = ShardEpochFromState(s, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(codec::ToString(e->tensor_pull_specs.at(3)), "nvfp4");
  EXPECT_EQ(codec::ToString(e->tensor_pull_specs.at(4)), "bf16");

  o->mutable_pull_codec()->set_block_size(3);
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // Without a policy the shard keeps its own codec for every tensor.
  s.clear_policy();
  e = ShardEpochFromState(s, 0);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->pull_spec.has_value());
  EXPECT_TRUE(e->tensor_pull_specs.empty());
}

TEST(ShardEpochFromStateTest, PullCodecPerBasisVersion) {
  // The owners' choices under the fidelity target: committed and proposed
  // versions that name a pull codec; one that names none is left out.
  gift::v1::ClusterState s = State();
  s.mutable_tensors(0)->set_name("w");
  gift::v1::TensorBasisState* b = s.add_bases();
  b->set_tensor_id(3);
  gift::v1::BasisVersion* v = b->add_versions();
  v->set_version(0);
  v->set_direct(true);
  v = b->add_versions();
  v->set_version(2);
  v->set_direct(true);
  *v->mutable_pull_codec() = Codec("nvfp4");
  b->mutable_proposal()->set_version(3);
  *b->mutable_proposal()->mutable_pull_codec() = Codec("nvfp4/mse");
  auto e = ShardEpochFromState(s, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->version_pull_specs.size(), 2u);
  EXPECT_EQ(codec::ToString(e->version_pull_specs.at({3, 2})), "nvfp4");
  EXPECT_EQ(codec::ToString(e->version_pull_specs.at({3, 3})), "nvfp4/mse");
  v->mutable_pull_codec()->set_block_size(3);
  EXPECT_EQ(ShardEpochFromState(s, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::server
