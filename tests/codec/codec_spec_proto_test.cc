#include "common/codec/codec_spec_proto.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

TEST(CodecSpecProto, RoundTripsEverySpecThroughTheWire) {
  for (const std::string& name : testing::AllSpecNames()) {
    const CodecSpec spec = testing::Spec(name);
    std::string bytes;
    ASSERT_TRUE(ToProto(spec).SerializeToString(&bytes));
    gift::v1::CodecSpec parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    absl::StatusOr<CodecSpec> back = FromProto(parsed);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(*back, spec) << name;
  }
}

TEST(CodecSpecProto, Fp32MapsToElementFormatF32) {
  const CodecSpec fp32 = testing::Spec("fp32");
  const gift::v1::CodecSpec p = ToProto(fp32);
  EXPECT_EQ(p.format(), gift::v1::ELEMENT_FORMAT_F32);
  EXPECT_EQ(static_cast<int>(gift::v1::ELEMENT_FORMAT_F32), 5);
  EXPECT_EQ(p.scaling(), gift::v1::SCALING_NONE);
  EXPECT_EQ(p.rounding(), gift::v1::ROUNDING_NEAREST_EVEN);
  EXPECT_EQ(p.block_size(), 0u);
  EXPECT_EQ(FromProto(p).value(), fp32);
  gift::v1::CodecSpec scaled = p;
  scaled.set_scaling(gift::v1::SCALING_PER_TENSOR);
  EXPECT_THAT(FromProto(scaled).status().message(), ::testing::HasSubstr("takes no scaling"));
  gift::v1::CodecSpec sr = p;
  sr.set_rounding(gift::v1::ROUNDING_STOCHASTIC);
  EXPECT_FALSE(FromProto(sr).ok());
}

TEST(CodecSpecProto, RefusesUnspecifiedAndInvalid) {
  gift::v1::CodecSpec p = ToProto(testing::Spec("e4m3/block32"));
  p.set_format(gift::v1::ELEMENT_FORMAT_UNSPECIFIED);
  EXPECT_THAT(FromProto(p).status().message(), ::testing::HasSubstr("element format"));
  p = ToProto(testing::Spec("e4m3/block32"));
  p.set_scaling(static_cast<gift::v1::Scaling>(42));
  EXPECT_THAT(FromProto(p).status().message(), ::testing::HasSubstr("scaling 42"));
  p = ToProto(testing::Spec("e4m3/block32"));
  p.set_rounding(gift::v1::ROUNDING_UNSPECIFIED);
  EXPECT_FALSE(FromProto(p).ok());
  p = ToProto(testing::Spec("e4m3/block32"));
  p.set_block_size(48);
  EXPECT_THAT(FromProto(p).status().message(), ::testing::HasSubstr("32 or 128"));
}

}  // namespace
}  // namespace gift::codec
