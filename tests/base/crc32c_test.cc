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

}  // namespace
}  // namespace gift::crc32c
