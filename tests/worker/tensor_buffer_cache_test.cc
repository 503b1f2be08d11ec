// TensorBufferCache on its own (issue 50: a unit of the engine with no test
// file of its own): one TensorBuffers per (tensor, every field of the push
// spec), kept while the plan fits, rebuilt when it does not, freed once unused
// for evict_after_runs runs, the error feedback residual counted and reset.
#include "worker/engine/tensor_buffer_cache.h"

#include <memory>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "tests/worker/engine_test_util.h"

namespace gift::worker {
namespace {

class TensorBufferCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = transport::CreateInprocTransport(&hub_, {.on_receive = [](transport::Message) {}});
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = *std::move(t);
    cache_ = std::make_unique<TensorBufferCache>(*transport_, inbox_, codec::CodecOptions{},
                                                 nullptr, /*evict_after_runs=*/2);
  }
  void TearDown() override {
    cache_->ReleaseRegions();
    cache_.reset();
  }

  // A 16 x 64 tensor in chunks of `rows_per_chunk` rows, pushed in `spec`.
  TensorStep Step(const char* spec, uint64_t rows_per_chunk = 4, bool error_feedback = false) {
    const testing::Tensor shape{.id = 7, .rows = 16, .cols = 64,
                                .rows_per_chunk = rows_per_chunk, .transformed = false};
    TensorStep t;
    t.tensor_id = shape.id;
    t.rows = shape.rows;
    t.cols = shape.cols;
    t.data = gradient_.data();
    t.chunks = testing::Routes(shape, {"s0", "s1"});
    t.push_spec = codec::ParseCodecSpec(spec).value();
    t.error_feedback = error_feedback;
    return t;
  }

  TensorBuffers* For(const TensorStep& t, uint64_t run) {
    auto buffers = cache_->For(t, testing::ChunkShapes(t), run);
    EXPECT_TRUE(buffers.ok()) << buffers.status();
    return buffers.value_or(nullptr);
  }

  std::vector<float> gradient_ = std::vector<float>(16 * 64, 1.0f);
  transport::InprocHub hub_;
  std::unique_ptr<transport::Transport> transport_;
  ResultInbox inbox_;
  std::unique_ptr<TensorBufferCache> cache_;
};

TEST_F(TensorBufferCacheTest, OneBufferSetPerTensorAndEveryFieldOfThePushSpec) {
  TensorBuffers* e4m3 = For(Step("e4m3/block128"), 1);
  ASSERT_NE(e4m3, nullptr);
  EXPECT_EQ(For(Step("e4m3/block128"), 2), e4m3);  // the plan fits: kept
  TensorBuffers* nvfp4 = For(Step("nvfp4"), 2);
  ASSERT_NE(nvfp4, nullptr);
  EXPECT_NE(nvfp4, e4m3);
  // nvfp4/mse differs from nvfp4 only in its block scale fit: its own set.
  TensorBuffers* mse = For(Step("nvfp4/mse"), 2);
  ASSERT_NE(mse, nullptr);
  EXPECT_NE(mse, nvfp4);
  EXPECT_EQ(For(Step("nvfp4"), 3), nvfp4);
  EXPECT_EQ(For(Step("e4m3/block128"), 3), e4m3);
}

TEST_F(TensorBufferCacheTest, APlanThatNoLongerFitsIsBuiltAgain) {
  const TensorStep four_rows = Step("e4m3/block128", 4);
  TensorBuffers* first = For(four_rows, 1);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->chunks().size(), 4u);
  // Other chunks (a server joined, say): new buffers for the new chunks.
  TensorBuffers* rechunked = For(Step("e4m3/block128", 8), 2);
  ASSERT_NE(rechunked, nullptr);
  EXPECT_EQ(rechunked->chunks().size(), 2u);
  EXPECT_TRUE(rechunked->Fits(Step("e4m3/block128", 8)));
  EXPECT_FALSE(rechunked->Fits(four_rows));
  // Error feedback asked for now: built again, with a residual.
  TensorBuffers* with_feedback = For(Step("e4m3/block128", 8, /*error_feedback=*/true), 3);
  ASSERT_NE(with_feedback, nullptr);
  EXPECT_TRUE(with_feedback->Fits(Step("e4m3/block128", 8, true)));
  cache_->Collect(3);
  EXPECT_GT(cache_->error_feedback_bytes(), 0u);
}

TEST_F(TensorBufferCacheTest, UnusedBuffersAreFreedAfterEvictAfterRuns) {
  TensorBuffers* nvfp4 = For(Step("nvfp4", 4, /*error_feedback=*/true), 1);
  ASSERT_NE(nvfp4, nullptr);
  TensorBuffers* e4m3 = For(Step("e4m3/block128"), 1);
  // Runs 2..3 use only e4m3: nvfp4 is kept until it has been unused for
  // more than 2 runs.
  EXPECT_EQ(For(Step("e4m3/block128"), 2), e4m3);
  cache_->Collect(2);
  EXPECT_GT(cache_->error_feedback_bytes(), 0u);  // nvfp4's residual, still held
  EXPECT_EQ(For(Step("e4m3/block128"), 3), e4m3);
  cache_->Collect(3);
  EXPECT_GT(cache_->error_feedback_bytes(), 0u);
  EXPECT_EQ(For(Step("e4m3/block128"), 4), e4m3);
  cache_->Collect(4);
  EXPECT_EQ(cache_->error_feedback_bytes(), 0u);  // freed with its buffers
  // Used again: built afresh, the e4m3 set untouched.
  EXPECT_NE(For(Step("nvfp4", 4, true), 5), nullptr);
  EXPECT_EQ(For(Step("e4m3/block128"), 5), e4m3);
}

TEST_F(TensorBufferCacheTest, ABadSpecIsAnErrorNamingTheTensorAndLeavesNoEntry) {
  TensorStep bad = Step("e4m3/block128");
  bad.push_spec.block_size = 3;  // E4M3 blocks hold 32 or 128
  auto buffers = cache_->For(bad, testing::ChunkShapes(bad), 1);
  ASSERT_FALSE(buffers.ok());
  EXPECT_EQ(buffers.status().code(), absl::StatusCode::kInvalidArgument) << buffers.status();
  EXPECT_NE(buffers.status().message().find("tensor 7"), std::string::npos) << buffers.status();
  // The good spec still builds.
  EXPECT_NE(For(Step("e4m3/block128"), 2), nullptr);
}

}  // namespace
}  // namespace gift::worker
