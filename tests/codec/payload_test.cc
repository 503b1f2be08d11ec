// The payload wire format: round trips, and refusal of every kind of bad
// input without reading out of bounds (run under ASan with GIFT_SANITIZE).
#include "common/codec/payload.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/base/crc32c.h"
#include "common/codec/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

using ::testing::HasSubstr;

struct Encoded {
  EncodedTensor tensor;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> payload;
};

Encoded MakePayload(const std::string& spec, std::vector<uint64_t> shape) {
  uint64_t cols = shape.back(), rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  const std::vector<float> x = testing::GradientLike(rows, cols, 17);
  auto t = EncodedTensor::Create(testing::Spec(spec), rows, cols).value();
  EXPECT_TRUE(Encode(x.data(), t.mutable_view(), {3, 4, 5}).ok());
  auto bytes = SerializePayload(t.view(), shape).value();
  return Encoded{std::move(t), shape, std::move(bytes)};
}

// Rewrites the checksum so that a deliberate change reaches the later checks.
void Reseal(std::vector<uint8_t>& p) {
  std::memset(p.data() + 40, 0, 4);
  const uint32_t crc = crc32c::Value(p.data(), p.size());
  std::memcpy(p.data() + 40, &crc, 4);
}

absl::Status Parse(const std::vector<uint8_t>& p) { return ParsePayload(p).status(); }

// Encoding in place (StartPayload, Encode into the view, FinishPayload)
// yields the same bytes as encoding apart and serializing.
TEST(Payload, EncodingInPlaceMatchesSerializing) {
  for (const std::string& spec : testing::AllSpecNames()) {
    for (const std::vector<uint64_t>& shape :
         {std::vector<uint64_t>{1}, {37}, {5, 33}, {2, 3, 129}, {0, 16}}) {
      Encoded e = MakePayload(spec, shape);
      auto size = PayloadSizeFor(testing::Spec(spec), shape);
      ASSERT_TRUE(size.ok()) << size.status();
      ASSERT_EQ(*size, e.payload.size());
      std::vector<uint8_t> buffer(*size, 0xAB);  // garbage the writer must cover
      auto view = StartPayload(testing::Spec(spec), shape, absl::MakeSpan(buffer));
      ASSERT_TRUE(view.ok()) << view.status();
      uint64_t cols = shape.back(), rows = 1;
      for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
      const std::vector<float> x = testing::GradientLike(rows, cols, 17);
      ASSERT_TRUE(Encode(x.data(), *view, {3, 4, 5}).ok());
      FinishPayload(absl::MakeSpan(buffer));
      EXPECT_EQ(buffer, e.payload) << spec;
    }
  }
  std::vector<uint8_t> small(10);
  EXPECT_FALSE(StartPayload(testing::Spec("e4m3/block128"), std::vector<uint64_t>{4, 4},
                            absl::MakeSpan(small))
                   .ok());
}

TEST(Payload, RoundTripsEverySpecAndShape) {
  for (const std::string& spec : testing::AllSpecNames()) {
    for (const std::vector<uint64_t>& shape :
         {std::vector<uint64_t>{1}, {37}, {5, 33}, {2, 3, 129}, {0, 16}, {4, 0}}) {
      Encoded e = MakePayload(spec, shape);
      absl::StatusOr<ParsedPayload> parsed = ParsePayload(e.payload);
      ASSERT_TRUE(parsed.ok()) << spec << ": " << parsed.status();
      EXPECT_EQ(parsed->shape, shape);
      const EncodedView& v = parsed->view;
      // How the writer fitted its block scales is not on the wire (a decoder
      // does not need it): the parsed spec says kAmax.
      CodecSpec carried = e.tensor.spec();
      carried.block_scale_fit = BlockScaleFit::kAmax;
      EXPECT_EQ(v.spec, carried);
      EXPECT_EQ(v.rows, e.tensor.layout().rows);
      EXPECT_EQ(v.cols, e.tensor.layout().cols);
      EXPECT_EQ(std::vector<uint8_t>(v.codes, v.codes + e.tensor.codes().size()), e.tensor.codes());
      EXPECT_EQ(std::vector<uint8_t>(v.scales, v.scales + e.tensor.scales().size()),
                e.tensor.scales());
    }
  }
}

TEST(Payload, SerializeChecksItsArguments) {
  Encoded e = MakePayload("e4m3/tensor", {4, 8});
  EXPECT_FALSE(PayloadSize(e.tensor.view(), std::vector<uint64_t>{8, 4}).ok());
  EXPECT_FALSE(PayloadSize(e.tensor.view(), std::vector<uint64_t>{}).ok());
  EXPECT_FALSE(PayloadSize(e.tensor.view(), std::vector<uint64_t>(9, 1)).ok());
  EXPECT_TRUE(PayloadSize(e.tensor.view(), std::vector<uint64_t>{2, 2, 8}).ok());
  std::vector<uint8_t> small(e.payload.size() - 1);
  EXPECT_FALSE(SerializePayload(e.tensor.view(), e.shape, absl::MakeSpan(small)).ok());
}

TEST(Payload, RejectsEveryTruncation) {
  const Encoded e = MakePayload("nvfp4", {3, 40});
  for (size_t len = 0; len < e.payload.size(); ++len) {
    // A copy of exactly `len` bytes so that ASan sees any read past the end.
    std::vector<uint8_t> cut(e.payload.begin(), e.payload.begin() + len);
    EXPECT_FALSE(Parse(cut).ok()) << "length " << len;
  }
  std::vector<uint8_t> cut(e.payload.begin(), e.payload.begin() + 20);
  EXPECT_THAT(Parse(cut).message(), HasSubstr("truncated"));
}

TEST(Payload, RejectsEverySingleByteCorruption) {
  const Encoded e = MakePayload("e4m3/block32", {2, 70});
  for (size_t i = 0; i < e.payload.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xFF}) {
      std::vector<uint8_t> bad = e.payload;
      bad[i] ^= flip;
      EXPECT_FALSE(Parse(bad).ok()) << "byte " << i << " ^ " << int(flip);
    }
  }
}

// Where a MAC verified the bytes the CRC pass is skipped: a stale checksum
// then parses, and every structural check still runs.
TEST(Payload, AChecksumCoveredByAMacIsNotRecomputed) {
  const Encoded e = MakePayload("e4m3/block128", {3, 200});
  std::vector<uint8_t> p = e.payload;
  p[40] ^= 0xFF;  // the stored CRC-32C no longer matches
  EXPECT_EQ(ParsePayload(p).status().code(), absl::StatusCode::kDataLoss);
  auto parsed = ParsePayload(p, {}, ChecksumCheck::kCoveredByMac);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->shape, e.shape);
  p[11] = 0;  // no dims
  EXPECT_THAT(ParsePayload(p, {}, ChecksumCheck::kCoveredByMac).status().message(),
              HasSubstr("dims"));
}

TEST(Payload, NamesWhatIsWrong) {
  const Encoded e = MakePayload("e5m2/mx32", {3, 100});
  auto with = [&](size_t offset, std::vector<uint8_t> bytes, bool reseal = true) {
    std::vector<uint8_t> p = e.payload;
    std::memcpy(p.data() + offset, bytes.data(), bytes.size());
    if (reseal) Reseal(p);
    return Parse(p);
  };
  EXPECT_THAT(with(0, {'X'}).message(), HasSubstr("magic"));
  EXPECT_EQ(with(4, {2, 0}).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(with(6, {72, 0}).message(), HasSubstr("header size"));
  EXPECT_THAT(with(8, {9}).message(), HasSubstr("unknown element format"));
  EXPECT_THAT(with(9, {7}).message(), HasSubstr("unknown scaling"));
  EXPECT_THAT(with(10, {2}).message(), HasSubstr("unknown rounding"));
  EXPECT_THAT(with(11, {0}).message(), HasSubstr("dims"));
  EXPECT_THAT(with(11, {9}).message(), HasSubstr("dims"));
  EXPECT_THAT(with(12, {64}).message(), HasSubstr("32 or 128"));
  EXPECT_THAT(with(16, {1}).message(), HasSubstr("elements"));
  EXPECT_THAT(with(24, {9}).message(), HasSubstr("scale bytes"));
  EXPECT_THAT(with(32, {9}).message(), HasSubstr("code bytes"));
  EXPECT_EQ(with(100, {0x55}, /*reseal=*/false).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(with(44, {1}).message(), HasSubstr("reserved"));
  // A shape whose element count overflows.
  std::vector<uint8_t> huge(8, 0xFF);
  EXPECT_THAT(with(48, huge).message(), HasSubstr("overflows"));
  // Trailing garbage after a valid payload.
  std::vector<uint8_t> longer = e.payload;
  longer.resize(longer.size() + 8);
  Reseal(longer);
  EXPECT_THAT(Parse(longer).message(), HasSubstr("trailing"));
  // Over the size limit: refused before anything else is read.
  EXPECT_EQ(ParsePayload(e.payload, PayloadLimits{.max_bytes = 64}).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(Payload, RejectsNonFiniteContentsEvenWithAValidChecksum) {
  const size_t header = 48 + 16;
  {  // NaN FP32 scale
    Encoded e = MakePayload("e4m3/tensor", {4, 8});
    const uint32_t nan = 0x7FC00000u;
    std::memcpy(e.payload.data() + header, &nan, 4);
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("scale 0"));
  }
  {  // E4M3 NaN code
    Encoded e = MakePayload("e4m3/tensor", {4, 8});
    e.payload[header + 8 + 5] = 0x7F;
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("code 5 is NaN"));
  }
  {  // E5M2 Inf code
    Encoded e = MakePayload("e5m2/none", {4, 8});
    e.payload[header + 3] = 0xFC;
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("code 3"));
  }
  {  // E8M0 NaN scale
    Encoded e = MakePayload("e4m3/mx32", {4, 8});
    e.payload[header + 2] = 0xFF;
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("E8M0 scale 2"));
  }
  {  // NVFP4 negative block scale
    Encoded e = MakePayload("nvfp4", {4, 8});
    e.payload[header + 1] = 0x90;
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("block scale 1"));
  }
  {  // nonzero padding
    Encoded e = MakePayload("e4m3/tensor", {4, 8});
    e.payload[header + 6] = 1;
    Reseal(e.payload);
    EXPECT_THAT(Parse(e.payload).message(), HasSubstr("padding"));
  }
}

// The vectorized scan reports the first bad code exactly: one or two bad codes
// at positions around the 32- and 128-byte strides, every bad code pattern of
// each format, in a no-scale payload of 1000 elements (header 48 + 8).
TEST(Payload, ReportsTheFirstNonFiniteCodeAtAnyPosition) {
  struct Case {
    const char* spec;
    int width;
    std::vector<uint32_t> bad;
  };
  const Case cases[] = {
      {"e4m3/none", 1, {0x7F, 0xFF}},
      {"e5m2/none", 1, {0x7C, 0x7D, 0x7E, 0x7F, 0xFC, 0xFD, 0xFE, 0xFF}},
      {"bf16", 2, {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF}},
      {"fp32", 4, {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u}},
  };
  const size_t n = 1000;
  for (const Case& c : cases) {
    const Encoded e = MakePayload(c.spec, {n});
    const size_t codes = e.payload.size() - n * c.width;
    ASSERT_TRUE(ParsePayload(e.payload).ok()) << c.spec;
    for (size_t first : {0u, 1u, 7u, 15u, 31u, 32u, 63u, 127u, 128u, 129u, 500u, 998u, 999u}) {
      for (uint32_t bad : c.bad) {
        std::vector<uint8_t> p = e.payload;
        std::memcpy(p.data() + codes + first * c.width, &bad, c.width);
        if (first + 3 < n) std::memcpy(p.data() + codes + (first + 3) * c.width, &bad, c.width);
        Reseal(p);
        EXPECT_THAT(Parse(p).message(),
                    HasSubstr("code " + std::to_string(first) + " is NaN or Inf"))
            << c.spec << " code " << std::hex << bad << std::dec << " at " << first;
      }
    }
  }
}

TEST(Payload, RandomGarbageIsRefused) {
  std::mt19937 rng(99);
  const Encoded e = MakePayload("e4m3/block128", {3, 300});
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> p;
    if (trial % 2 == 0) {
      p.resize(rng() % 300);
      for (auto& b : p) b = static_cast<uint8_t>(rng());
    } else {
      // A valid header with random corruption further in, resealed.
      p = e.payload;
      const int hits = 1 + rng() % 4;
      for (int h = 0; h < hits; ++h) p[rng() % p.size()] = static_cast<uint8_t>(rng());
      if (trial % 4 == 1) Reseal(p);
    }
    const absl::StatusOr<ParsedPayload> parsed = ParsePayload(p);
    if (parsed.ok()) {
      // Only a resealed change confined to codes/scales can parse; it must
      // still be a well-formed, decodable tensor.
      std::vector<float> out(parsed->view.rows * parsed->view.cols);
      ASSERT_TRUE(Decode(parsed->view, out.data()).ok());
      for (float v : out) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

}  // namespace
}  // namespace gift::codec
