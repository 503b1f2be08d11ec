#include "common/base/crc32c.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gift::crc32c {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 appendix B.4 and the common check value.
  EXPECT_EQ(Value("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Value(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Value(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Value(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(Value(nullptr, 0), 0u);
}

TEST(Crc32c, ExtendEqualsWholeAndMatchesPortable) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(10007);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = Value(data.data(), data.size());
  EXPECT_EQ(whole, ExtendPortable(0, data.data(), data.size()));
  for (size_t split : {0u, 1u, 7u, 8u, 9u, 4096u, 10006u, 10007u}) {
    EXPECT_EQ(Extend(Value(data.data(), split), data.data() + split, data.size() - split), whole)
        << "split " << split;
  }
}

// The three-way interleaved path (stripes of 8 KiB and 256 bytes, merged by
// zero-shift tables) against the byte-at-a-time table, for every length and
// several starting alignments and initial CRCs.
TEST(Crc32c, AllLengthsMatchPortable) {
  std::mt19937 rng(11);
  std::vector<uint8_t> data(100000 + 8);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Every length up to 4096 (all the small-stripe boundaries), then a stride
  // that crosses the 24 KiB chunks at many offsets.
  for (size_t n = 0; n <= 100000; n += (n < 4096 ? 1 : 97)) {
    const size_t off = n % 8;
    const uint32_t init = static_cast<uint32_t>(n * 2654435761u);
    ASSERT_EQ(Extend(init, data.data() + off, n), ExtendPortable(init, data.data() + off, n))
        << "length " << n;
  }
  for (size_t n : {24575u, 24576u, 24577u, 49152u, 49160u, 99999u, 100000u}) {
    ASSERT_EQ(Value(data.data(), n), ExtendPortable(0, data.data(), n)) << "length " << n;
  }
}

}  // namespace
}  // namespace gift::crc32c
