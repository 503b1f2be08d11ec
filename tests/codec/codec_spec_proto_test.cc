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
