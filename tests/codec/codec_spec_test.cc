#include "common/codec/codec_spec.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

using ::testing::HasSubstr;

TEST(CodecSpec, EveryListedSpecParsesAndPrintsBack) {
  for (const std::string& name : testing::AllSpecNames()) {
    absl::StatusOr<CodecSpec> spec = ParseCodecSpec(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_TRUE(Validate(*spec).ok());
    // Printing drops the default "/rne" suffix; parsing that gives the same spec.
    EXPECT_EQ(*ParseCodecSpec(ToString(*spec)), *spec) << name;
  }
}

TEST(CodecSpec, RejectsBadCombinationsWithReasons) {
  EXPECT_THAT(ParseCodecSpec("e4m3/block64").status().message(), HasSubstr("32 or 128"));
  EXPECT_THAT(ParseCodecSpec("fp7").status().message(), HasSubstr("unknown format"));
  EXPECT_THAT(ParseCodecSpec("bf16/tensor").status().message(), HasSubstr("no scaling"));
  EXPECT_THAT(ParseCodecSpec("nvfp4/block32").status().message(), HasSubstr("e4m3 and e5m2"));
  EXPECT_THAT(ParseCodecSpec("e4m3/tensor/rtz").status().message(), HasSubstr("unknown part"));
  EXPECT_FALSE(Validate(CodecSpec{static_cast<Format>(9), Scaling::kNone, 0}).ok());
  EXPECT_FALSE(Validate(CodecSpec{Format::kE4M3, static_cast<Scaling>(9), 0}).ok());
  EXPECT_FALSE(
      Validate(CodecSpec{Format::kE4M3, Scaling::kPerTensor, 0, static_cast<Rounding>(3)}).ok());
  EXPECT_FALSE(Validate(CodecSpec{Format::kNvfp4, Scaling::kNvfp4, 32}).ok());
}

TEST(CodecSpec, Fp32IsAnUnscaledPassthrough) {
  const CodecSpec fp32{Format::kF32, Scaling::kNone, 0, Rounding::kNearestEven};
  EXPECT_EQ(static_cast<int>(Format::kF32), 5);  // wire value
  EXPECT_TRUE(Validate(fp32).ok());
  EXPECT_EQ(ParseCodecSpec("fp32").value(), fp32);
  EXPECT_EQ(ParseCodecSpec("fp32/none").value(), fp32);
  EXPECT_EQ(ParseCodecSpec("fp32/rne").value(), fp32);
  EXPECT_EQ(ToString(fp32), "fp32");
  EXPECT_EQ(FormatName(Format::kF32), "fp32");
  for (const char* bad : {"fp32/block128", "fp32/block32", "fp32/tensor", "fp32/mx32"}) {
    const absl::Status s = ParseCodecSpec(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("fp32 is an exact passthrough and takes no scaling")) << bad;
    EXPECT_THAT(s.message(), HasSubstr(bad));
  }
  EXPECT_THAT(ParseCodecSpec("fp32/sr").status().message(),
              HasSubstr("stochastic rounding does not apply"));
  EXPECT_FALSE(Validate(CodecSpec{Format::kF32, Scaling::kPerTensor, 0}).ok());
  EXPECT_FALSE(Validate(CodecSpec{Format::kF32, Scaling::kPerBlockFp32, 32}).ok());
  EXPECT_FALSE(Validate(CodecSpec{Format::kF32, Scaling::kNone, 32}).ok());
  EXPECT_FALSE(Validate(CodecSpec{Format::kF32, Scaling::kNone, 0, Rounding::kStochastic}).ok());
  EXPECT_THAT(ParseCodecSpec("fp16").status().message(), HasSubstr("bf16 or fp32"));
  const EncodedLayout l = ComputeLayout(fp32, 3, 5).value();
  EXPECT_EQ(l.row_code_bytes, 20u);
  EXPECT_EQ(l.code_bytes, 60u);
  EXPECT_EQ(l.scale_bytes, 0u);
  EXPECT_EQ(l.num_blocks, 0u);
  EXPECT_EQ(ElementErrorBound(Format::kF32, Rounding::kNearestEven, 1.0, 3.14159), 0.0);
}

TEST(CodecSpec, LayoutSizes) {
  // 3 rows of 33: block 32 gives two blocks per row, the second of 1 element.
  auto l = ComputeLayout(testing::Spec("e4m3/block32"), 3, 33).value();
  EXPECT_EQ(l.num_elements, 99u);
  EXPECT_EQ(l.blocks_per_row, 2u);
  EXPECT_EQ(l.num_blocks, 6u);
  EXPECT_EQ(l.code_bytes, 99u);
  EXPECT_EQ(l.scale_bytes, 24u);
  l = ComputeLayout(testing::Spec("e5m2/mx128"), 2, 300).value();
  EXPECT_EQ(l.num_blocks, 6u);
  EXPECT_EQ(l.scale_bytes, 6u);
  // NVFP4: rows start on byte boundaries; E4M3 block scales plus one FP32.
  l = ComputeLayout(testing::Spec("nvfp4"), 3, 33).value();
  EXPECT_EQ(l.row_code_bytes, 17u);
  EXPECT_EQ(l.code_bytes, 51u);
  EXPECT_EQ(l.num_blocks, 9u);
  EXPECT_EQ(l.scale_bytes, 9u + 4u);
  l = ComputeLayout(testing::Spec("bf16"), 4, 5).value();
  EXPECT_EQ(l.code_bytes, 40u);
  EXPECT_EQ(l.scale_bytes, 0u);
  EXPECT_EQ(ComputeLayout(testing::Spec("e4m3/tensor"), 0, 5).value().num_elements, 0u);
  EXPECT_EQ(ComputeLayout(testing::Spec("e4m3/tensor"), uint64_t{1} << 40, uint64_t{1} << 40)
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
}

TEST(CodecSpec, FormatFacts) {
  EXPECT_EQ(FormatMax(Format::kE4M3), 448.0f);
  EXPECT_EQ(FormatMax(Format::kE5M2), 57344.0f);
  EXPECT_EQ(FormatMax(Format::kNvfp4), 6.0f);
  EXPECT_EQ(FormatMax(Format::kBf16), testing::FromBits(0x7F7F0000u));
  EXPECT_EQ(BitsPerElement(Format::kNvfp4), 4);
  EXPECT_EQ(BitsPerElement(Format::kBf16), 16);
  EXPECT_EQ(FormatMax(Format::kF32), std::numeric_limits<float>::max());
  EXPECT_EQ(BitsPerElement(Format::kF32), 32);
}

}  // namespace
}  // namespace gift::codec
