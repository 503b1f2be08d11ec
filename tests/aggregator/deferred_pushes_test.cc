#include "server/aggregator/deferred_pushes.h"

#include <vector>

#include "gtest/gtest.h"

namespace gift::server {
namespace {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

ChunkHeader Push(uint64_t epoch, uint64_t tensor, uint32_t rank) {
  return {
      .kind = ChunkKind::kPush, .epoch = epoch, .tensor_id = tensor, .rank = rank, .world_size = 4};
}

TEST(DeferredPushesTest, HoldsUpToTheByteBound) {
  DeferredPushes deferred(10);
  EXPECT_TRUE(deferred.Hold(Push(2, 7, 0), std::vector<uint8_t>(6, 1)).ok());
  const absl::Status over = deferred.Hold(Push(2, 7, 1), std::vector<uint8_t>(5, 2));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("6 bytes of pushes already wait"), absl::string_view::npos) << over;
  EXPECT_EQ(deferred.size(), 1u);
  EXPECT_EQ(deferred.bytes(), 6u);
  EXPECT_TRUE(deferred.Hold(Push(2, 7, 1), std::vector<uint8_t>(4, 2)).ok());  // exactly 10
  EXPECT_EQ(deferred.size(), 2u);
  EXPECT_EQ(deferred.bytes(), 10u);
}

TEST(DeferredPushesTest, TakesTheDecidableInArrivalOrderAndRefusesEndedEpochs) {
  DeferredPushes deferred(1000);
  ASSERT_TRUE(deferred.Hold(Push(3, 7, 0), std::vector<uint8_t>(10, 0)).ok());  // ready
  ASSERT_TRUE(deferred.Hold(Push(1, 7, 1), std::vector<uint8_t>(20, 1)).ok());  // ended
  ASSERT_TRUE(deferred.Hold(Push(3, 9, 2), std::vector<uint8_t>(30, 2)).ok());  // chunk unknown
  ASSERT_TRUE(deferred.Hold(Push(4, 7, 3), std::vector<uint8_t>(40, 3)).ok());  // epoch ahead
  ASSERT_TRUE(deferred.Hold(Push(3, 7, 2), std::vector<uint8_t>(50, 4)).ok());  // ready
  std::vector<absl::Status> refused;
  std::vector<DeferredPushes::Push> ready = deferred.TakeDecidable(
      3, [](const ChunkHeader& h) { return h.epoch > 3 || h.tensor_id != 7; }, refused);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].header.rank, 0u);
  EXPECT_EQ(ready[0].payload, std::vector<uint8_t>(10, 0));
  EXPECT_EQ(ready[1].header.rank, 2u);
  EXPECT_EQ(ready[1].payload, std::vector<uint8_t>(50, 4));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused[0].message().find("deferred push of epoch 1"), absl::string_view::npos)
      << refused[0];
  EXPECT_EQ(deferred.size(), 2u);
  EXPECT_EQ(deferred.bytes(), 70u);

  // Epoch 4 with everything known: its push comes out, and epoch 3's push
  // for the chunk never learned is refused.
  refused.clear();
  ready = deferred.TakeDecidable(
      4, [](const ChunkHeader&) { return false; }, refused);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].header.epoch, 4u);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].message().find("deferred push of epoch 3"), absl::string_view::npos)
      << refused[0];
  EXPECT_EQ(deferred.size(), 0u);
  EXPECT_EQ(deferred.bytes(), 0u);
}

}  // namespace
}  // namespace gift::server
