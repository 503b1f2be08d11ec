#include "common/dataplane/chunk_header.h"

#include "gtest/gtest.h"

namespace gift::dataplane {
namespace {

ChunkHeader Sample() {
  return {.kind = ChunkKind::kPush,
          .epoch = 0x0102030405060708,
          .step = 99,
          .tensor_id = 7,
          .basis_version = 3,
          .chunk_index = 2,
          .rank = 1,
          .world_size = 4,
          .status_code = 0};
}

TEST(ChunkHeaderTest, RoundTrips) {
  for (ChunkKind kind : {ChunkKind::kPush, ChunkKind::kResult, ChunkKind::kAbort}) {
    ChunkHeader h = Sample();
    h.kind = kind;
    if (kind == ChunkKind::kAbort) h.status_code = 10;
    const auto bytes = SerializeChunkHeader(h);
    auto parsed = ParseChunkHeader(bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, h);
  }
  EXPECT_EQ(ToString(Sample()),
            "push epoch=72623859790382856 step=99 tensor=7 chunk=2 basis=3 rank=1/4");
}

TEST(ChunkHeaderTest, RanksSummedSurvivesTheWireForEveryKind) {
  for (ChunkKind kind : {ChunkKind::kPush, ChunkKind::kResult, ChunkKind::kAbort,
                         ChunkKind::kNodePush, ChunkKind::kNodeMember}) {
    ChunkHeader h = Sample();
    h.kind = kind;
    h.set_ranks_summed(3);
    auto parsed = ParseChunkHeader(SerializeChunkHeader(h));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const bool one_rank = kind == ChunkKind::kPush || kind == ChunkKind::kNodeMember;
    EXPECT_EQ(parsed->ranks_summed(), one_rank ? 1u : 3u) << ToString(h);
    // A sender's rank is only changed where the field holds a count.
    if (kind != ChunkKind::kResult && kind != ChunkKind::kAbort) {
      EXPECT_EQ(parsed->rank, 1u);
    }
  }
  ChunkHeader result = Sample();
  result.kind = ChunkKind::kResult;
  result.set_ranks_summed(4);
  EXPECT_EQ(ToString(result),
            "result epoch=72623859790382856 step=99 tensor=7 chunk=2 basis=3 ranks=4/4");
}

TEST(ChunkHeaderTest, EveryCorruptionIsRefused) {
  const auto good = SerializeChunkHeader(Sample());
  // Any single flipped bit is caught (field check or checksum).
  for (size_t byte = 0; byte < kChunkHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(ParseChunkHeader(bad).ok()) << "byte " << byte << " bit " << bit;
    }
  }
  EXPECT_EQ(ParseChunkHeader(absl::MakeSpan(good.data(), 63)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto flipped_crc = good;
  flipped_crc[56] ^= 1;
  EXPECT_EQ(ParseChunkHeader(flipped_crc).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ChunkHeaderTest, RefusesInconsistentFields) {
  ChunkHeader h = Sample();
  h.rank = 4;  // not below world size 4
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  h = Sample();
  h.world_size = 0;
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  h = Sample();
  h.kind = ChunkKind::kResult;
  h.rank = 4;  // a result's rank is the number of ranks summed
  EXPECT_TRUE(ParseChunkHeader(SerializeChunkHeader(h)).ok());
}

TEST(ChunkHeaderTest, NodeKindsRoundTripAndCarryTheirRankCount) {
  ChunkHeader h = Sample();
  h.kind = ChunkKind::kNodePush;
  h.status_code = 2;  // the ranks its sum holds
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).value(), h);
  h.status_code = 0;
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  h.status_code = 5;  // more than the world size 4
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  h.status_code = 4;
  h.rank = 4;  // the sender's rank, below the world size
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  h = Sample();
  h.kind = ChunkKind::kNodeMember;
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).value(), h);
  h.rank = 4;
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Kinds beyond the newest are unknown.
  h = Sample();
  h.kind = static_cast<ChunkKind>(6);
  EXPECT_EQ(ParseChunkHeader(SerializeChunkHeader(h)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::dataplane
