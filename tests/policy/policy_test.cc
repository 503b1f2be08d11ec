#include "common/policy/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"

namespace gift::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

gift::v1::Policy Defaults() { return WithDefaults(gift::v1::Policy()); }

TEST(PolicyDefaultsTest, AZeroDriftThresholdIsKeptAndDisablesDrift) {
  gift::v1::Policy p;
  p.mutable_refresh()->set_drift_threshold(0.0);
  EXPECT_DOUBLE_EQ(WithDefaults(p).refresh().drift_threshold(), 0.0);
  EXPECT_TRUE(Validate(WithDefaults(p)).ok());
  p.mutable_refresh()->clear_drift_threshold();
  EXPECT_DOUBLE_EQ(WithDefaults(p).refresh().drift_threshold(), 0.2);
}

TEST(PolicyDefaultsTest, AZeroGiftBudgetIsKeptAndTurnsTheBudgetOff) {
  gift::v1::Policy p;
  p.mutable_selection()->set_gift_budget(0.0);
  EXPECT_DOUBLE_EQ(WithDefaults(p).selection().gift_budget(), 0.0);
  EXPECT_TRUE(Validate(WithDefaults(p)).ok());
  p.mutable_selection()->clear_gift_budget();
  EXPECT_DOUBLE_EQ(WithDefaults(p).selection().gift_budget(), 0.05);
}

TEST(ParseGiftBudgetTest, AutoOffOrAFractionInRange) {
  EXPECT_EQ(*ParseGiftBudget("auto"), std::nullopt);
  EXPECT_EQ(*ParseGiftBudget("off"), 0.0);
  EXPECT_EQ(*ParseGiftBudget("0.05"), 0.05);
  EXPECT_EQ(*ParseGiftBudget("100"), kMaxGiftBudget);
  for (const char* bad : {"-0.1", "100.5", "nan", "inf", "five", ""}) {
    const absl::Status s = ParseGiftBudget(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find(absl::StrCat("'", bad, "'")), std::string::npos) << s;
  }
}

TEST(PolicyDefaultsTest, FillsTheDocumentedDefaults) {
  const gift::v1::Policy p = Defaults();
  EXPECT_EQ(p.transform().sides(), gift::v1::SIDES_BOTH);
  EXPECT_THAT(p.transform().powers(), ElementsAre(0.125, 0.25));
  EXPECT_EQ(p.transform().source(), gift::v1::GEOMETRY_SOURCE_GRADIENTS);
  EXPECT_EQ(p.transform().rank(), 64u);
  EXPECT_EQ(p.transform().residual(), gift::v1::RESIDUAL_MODEL_ISOTROPIC);
  EXPECT_DOUBLE_EQ(p.transform().ema_decay(), 0.95);
  EXPECT_EQ(p.transform().collect_period(), 1u);
  EXPECT_EQ(p.transform().statistics(), gift::v1::STATISTICS_FORM_SKETCH);
  EXPECT_DOUBLE_EQ(p.transform().damping_eps(), 1e-3);
  EXPECT_EQ(p.transform().push_codec().format(), gift::v1::ELEMENT_FORMAT_E4M3);
  EXPECT_EQ(p.transform().push_codec().scaling(), gift::v1::SCALING_PER_BLOCK_FP32);
  EXPECT_EQ(p.transform().push_codec().block_size(), 128u);
  EXPECT_EQ(p.transform().pull_codec().format(), gift::v1::ELEMENT_FORMAT_E4M3);
  EXPECT_EQ(p.transform().pull_codec().scaling(), gift::v1::SCALING_PER_BLOCK_FP32);
  EXPECT_EQ(p.transform().pull_codec().block_size(), 128u);
  EXPECT_FALSE(p.transform().error_feedback());
  EXPECT_EQ(p.refresh().period_steps(), 10u);
  EXPECT_DOUBLE_EQ(p.refresh().drift_threshold(), 0.2);
  EXPECT_EQ(p.refresh().activation_lead_steps(), 4u);
  EXPECT_EQ(p.refresh().measure_period(), 4u);
  EXPECT_EQ(p.transform().direct_collect_stride(), 1u);
  EXPECT_EQ(p.selection().mode(), gift::v1::SELECTION_MODE_MEASURED);
  EXPECT_DOUBLE_EQ(p.selection().margin(), 0.1);
  EXPECT_EQ(p.selection().min_elements(), 4096u);
  EXPECT_DOUBLE_EQ(p.selection().gift_budget(), 0.05);
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
}

TEST(PolicyDefaultsTest, KeepsSetValues) {
  gift::v1::Policy in;
  in.mutable_transform()->set_rank(8);
  in.mutable_transform()->add_powers(0.5);
  in.mutable_refresh()->set_period_steps(3);
  const gift::v1::Policy p = WithDefaults(in);
  EXPECT_EQ(p.transform().rank(), 8u);
  EXPECT_THAT(p.transform().powers(), ElementsAre(0.5));
  EXPECT_EQ(p.refresh().period_steps(), 3u);
}

struct BadCase {
  const char* field;
  void (*mutate)(gift::v1::Policy*);
};

TEST(PolicyValidateTest, NamesTheFieldAndValue) {
  const std::vector<BadCase> cases = {
      {"transform.powers[2] = -1",
       [](gift::v1::Policy* p) { p->mutable_transform()->add_powers(-1); }},
      {"transform.ema_decay = 1.5",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_ema_decay(1.5); }},
      {"transform.damping_eps = -1",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_damping_eps(-1); }},
      {"transform.sides = 9",
       [](gift::v1::Policy* p) {
         p->mutable_transform()->set_sides(static_cast<gift::v1::Sides>(9));
       }},
      {"transform.statistics_codec",
       [](gift::v1::Policy* p) {
         p->mutable_transform()->mutable_statistics_codec()->set_format(
             gift::v1::ELEMENT_FORMAT_BF16);
         p->mutable_transform()->mutable_statistics_codec()->set_scaling(
             gift::v1::SCALING_NVFP4);
       }},
      {"transform.push_codec",
       [](gift::v1::Policy* p) {
         p->mutable_transform()->mutable_push_codec()->set_scaling(gift::v1::SCALING_NVFP4);
       }},
      {"transform.statistics_columns = 1025",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_statistics_columns(1025); }},
      {"overrides[0].statistics_columns = 0",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("w");
         o->set_statistics_columns(0);
       }},
      {"selection.margin = 1", [](gift::v1::Policy* p) { p->mutable_selection()->set_margin(1); }},
      {"selection.include[0]",
       [](gift::v1::Policy* p) { p->mutable_selection()->add_include(""); }},
      {"refresh.drift_threshold = -0.5",
       [](gift::v1::Policy* p) { p->mutable_refresh()->set_drift_threshold(-0.5); }},
      {"overrides[0].glob", [](gift::v1::Policy* p) { p->add_overrides()->set_rank(3); }},
      {"overrides[0].glob = [",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("[");
         o->set_enabled(false);
       }},
      {"selection.exclude[0] = layers.[0-3].w",
       [](gift::v1::Policy* p) { p->mutable_selection()->add_exclude("layers.[0-3].w"); }},
      {"overrides[0].rank = 0",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->set_rank(0);
       }},
      {"overrides[0].period_steps = 0",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->set_period_steps(0);
       }},
      // Red-team cases: accepted before, they stalled the basis owner.
      {"transform.rank = 99999999",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_rank(99999999); }},
      {"transform.powers[0] = 1e+300",
       [](gift::v1::Policy* p) {
         p->mutable_transform()->clear_powers();
         p->mutable_transform()->add_powers(1e300);
       }},
      {"transform.powers[2] = 1.5",
       [](gift::v1::Policy* p) { p->mutable_transform()->add_powers(1.5); }},
      {"transform.powers[2] = nan",
       [](gift::v1::Policy* p) { p->mutable_transform()->add_powers(std::nan("")); }},
      {"overrides[0].powers[0] = inf",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->add_powers(INFINITY);
       }},
      {"overrides[0].rank = 70000",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->set_rank(70000);
       }},
      {"refresh.period_steps = 4294967295",
       [](gift::v1::Policy* p) { p->mutable_refresh()->set_period_steps(4294967295u); }},
      {"selection.gift_budget = -0.5",
       [](gift::v1::Policy* p) { p->mutable_selection()->set_gift_budget(-0.5); }},
      {"transform.direct_collect_stride = 2000000",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_direct_collect_stride(2000000); }},
      {"transform.rotation_block = 24",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_rotation_block(24); }},
      {"transform.rotation_block = 512",
       [](gift::v1::Policy* p) { p->mutable_transform()->set_rotation_block(512); }},
      {"overrides[0].rotation_block = 1",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->set_rotation_block(1);
       }},
      {"refresh.measure_period = 2000000",
       [](gift::v1::Policy* p) { p->mutable_refresh()->set_measure_period(2000000); }},
      {"transform.statistics = 7",
       [](gift::v1::Policy* p) {
         p->mutable_transform()->set_statistics(static_cast<gift::v1::StatisticsForm>(7));
       }},
      {"refresh.activation_lead_steps = 2000000",
       [](gift::v1::Policy* p) { p->mutable_refresh()->set_activation_lead_steps(2000000); }},
      {"selection.exclude[0] = a\\nb",
       [](gift::v1::Policy* p) { p->mutable_selection()->add_exclude("a\nb"); }},
      {"selection.margin = nan",
       [](gift::v1::Policy* p) { p->mutable_selection()->set_margin(std::nan("")); }},
      {"overrides[0].push_codec",
       [](gift::v1::Policy* p) {
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->mutable_push_codec()->set_format(gift::v1::ELEMENT_FORMAT_NVFP4);
         o->mutable_push_codec()->set_scaling(gift::v1::SCALING_PER_BLOCK_FP32);
       }},
      {"overrides[1].pull_codec",
       [](gift::v1::Policy* p) {
         p->add_overrides()->set_glob("a");
         auto* o = p->add_overrides();
         o->set_glob("*");
         o->mutable_pull_codec();  // present but empty: no format
       }},
  };
  for (const BadCase& c : cases) {
    gift::v1::Policy p = Defaults();
    c.mutate(&p);
    const absl::Status s = Validate(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

TEST(PolicyValidateTest, BoundaryValuesPass) {
  gift::v1::Policy p = Defaults();
  p.mutable_transform()->set_rank(kMaxRank);
  p.mutable_transform()->clear_powers();
  p.mutable_transform()->add_powers(1.0);
  p.mutable_transform()->add_powers(1e-9);
  p.mutable_refresh()->set_period_steps(kMaxSteps);
  EXPECT_TRUE(Validate(p).ok()) << Validate(p);
}

TEST(PolicyValidateTest, RanksAgainstTensors) {
  const std::vector<int64_t> mlp = {8, 16}, attn = {32, 48}, bias = {4096};
  const std::vector<NamedShape> tensors = {
      {"layers.0.mlp", mlp}, {"layers.0.attn", attn}, {"layers.0.bias", bias}};
  gift::v1::Policy p = Defaults();
  EXPECT_TRUE(ValidateRanksForTensors(p, tensors).ok());  // the default 64 is clamped
  p.mutable_transform()->set_rank(48);
  EXPECT_TRUE(ValidateRanksForTensors(p, tensors).ok());
  p.mutable_transform()->set_rank(49);
  absl::Status s = ValidateRanksForTensors(p, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("transform.rank = 49"));
  EXPECT_THAT(s.message(), HasSubstr("48, tensor 'layers.0.attn' [32, 48]"));
  // The side decides the dimension: only the output side (32) of attn.
  p.mutable_transform()->set_sides(gift::v1::SIDES_OUTPUT);
  p.mutable_transform()->set_rank(33);
  EXPECT_FALSE(ValidateRanksForTensors(p, tensors).ok());
  p.mutable_transform()->set_rank(32);
  EXPECT_TRUE(ValidateRanksForTensors(p, tensors).ok());

  gift::v1::Policy q = Defaults();
  auto* o = q.add_overrides();
  o->set_glob("*.mlp");
  o->set_rank(17);
  s = ValidateRanksForTensors(q, tensors);
  EXPECT_THAT(s.message(), HasSubstr("overrides[0].rank = 17"));
  o->set_rank(16);
  EXPECT_TRUE(ValidateRanksForTensors(q, tensors).ok());
  o->set_glob("nothing.*");  // applies to no known tensor
  o->set_rank(1000);
  EXPECT_TRUE(ValidateRanksForTensors(q, tensors).ok());
  EXPECT_FALSE(ValidateRanksForTensors(q, {{"nothing.w", mlp}}).ok());
}

TEST(GlobTest, Matches) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*", "layers.0.attn.q"));
  EXPECT_TRUE(GlobMatch("layers.*.attn.?", "layers.12.attn.q"));
  EXPECT_FALSE(GlobMatch("layers.*.attn.?", "layers.12.attn.qk"));
  EXPECT_TRUE(GlobMatch("*mlp*", "layers.3.mlp.up"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXbYbZ"));
  EXPECT_TRUE(GlobMatch("exact", "exact"));
  EXPECT_FALSE(GlobMatch("exact", "exactly"));
  EXPECT_FALSE(GlobMatch("?", ""));
  EXPECT_TRUE(GlobMatch("**?", "x"));
  EXPECT_FALSE(GlobMatch("", "x"));
}

TEST(ResolveTest, OverridesApplyInOrderFieldByField) {
  gift::v1::Policy p = Defaults();
  auto* a = p.add_overrides();
  a->set_glob("layers.*");
  a->set_rank(16);
  a->set_sides(gift::v1::SIDES_INPUT);
  auto* b = p.add_overrides();
  b->set_glob("*.mlp.*");
  b->set_rank(32);
  b->set_period_steps(5);
  ASSERT_TRUE(Validate(p).ok());

  const std::vector<int64_t> shape = {512, 512};
  TensorSettings mlp = ResolveTensorSettings(p, "layers.1.mlp.up", shape);
  EXPECT_EQ(mlp.transform.rank(), 32u);                     // last match wins
  EXPECT_EQ(mlp.transform.sides(), gift::v1::SIDES_INPUT);  // kept from the first
  EXPECT_EQ(mlp.period_steps, 5u);
  EXPECT_EQ(mlp.selection, Selection::kMeasure);

  TensorSettings attn = ResolveTensorSettings(p, "layers.1.attn.q", shape);
  EXPECT_EQ(attn.transform.rank(), 16u);
  EXPECT_EQ(attn.period_steps, 10u);

  TensorSettings head = ResolveTensorSettings(p, "head", shape);
  EXPECT_EQ(head.transform.rank(), 64u);
  EXPECT_EQ(head.transform.sides(), gift::v1::SIDES_BOTH);
}

TEST(ResolveTest, ErrorFeedbackGlobalAndPerTensor) {
  gift::v1::Policy p = Defaults();
  p.mutable_transform()->set_error_feedback(true);
  auto* off = p.add_overrides();
  off->set_glob("*.norm*");
  off->set_error_feedback(false);
  auto* rank_only = p.add_overrides();  // matches too, leaves error feedback alone
  rank_only->set_glob("*");
  rank_only->set_rank(8);
  ASSERT_TRUE(Validate(p).ok());
  const std::vector<int64_t> shape = {512, 512};
  EXPECT_TRUE(ResolveTensorSettings(p, "layers.0.mlp.up", shape).transform.error_feedback());
  EXPECT_FALSE(ResolveTensorSettings(p, "layers.0.norm.weight", shape).transform.error_feedback());

  p.mutable_transform()->set_error_feedback(false);
  auto* on = p.add_overrides();
  on->set_glob("head");
  on->set_error_feedback(true);
  EXPECT_TRUE(ResolveTensorSettings(p, "head", shape).transform.error_feedback());
  EXPECT_FALSE(ResolveTensorSettings(p, "layers.0.mlp.up", shape).transform.error_feedback());
}

TEST(ResolveTest, RotationGlobalPerTensorAndOnlyWhereTheLastDimensionIsAMultiple) {
  gift::v1::Policy p = Defaults();
  EXPECT_EQ(p.transform().rotation_block(), 0u);  // off by default
  p.mutable_transform()->set_rotation_block(32);
  auto* off = p.add_overrides();
  off->set_glob("head");
  off->set_rotation_block(0);
  auto* sixteen = p.add_overrides();
  sixteen->set_glob("*.down");
  sixteen->set_rotation_block(16);
  ASSERT_TRUE(Validate(p).ok()) << Validate(p);
  auto block = [&](const char* name, std::vector<int64_t> shape) {
    return ResolveTensorSettings(p, name, shape).transform.rotation_block();
  };
  EXPECT_EQ(block("mlp.up", {1376, 512}), 32u);
  EXPECT_EQ(block("mlp.down", {512, 1376}), 16u);  // 1376 = 16 x 86
  EXPECT_EQ(block("head", {512, 512}), 0u);
  EXPECT_EQ(block("q", {512, 1400}), 0u);  // 1400 is not a multiple of 32
  EXPECT_EQ(block("norm.weight", {512}), 32u);
  EXPECT_EQ(block("scalar", {}), 0u);
  // Boundaries.
  p.mutable_transform()->set_rotation_block(kMaxRotationBlock);
  EXPECT_TRUE(Validate(p).ok());
  p.mutable_transform()->set_rotation_block(2);
  EXPECT_TRUE(Validate(p).ok());
}

TEST(ResolveTest, Selection) {
  gift::v1::Policy p = Defaults();
  const std::vector<int64_t> big = {256, 256}, small = {32, 32}, vec = {65536};
  EXPECT_EQ(ResolveTensorSettings(p, "w", big).selection, Selection::kMeasure);
  EXPECT_EQ(ResolveTensorSettings(p, "w", small).selection, Selection::kDirect);  // < 4096
  EXPECT_EQ(ResolveTensorSettings(p, "b", vec).selection, Selection::kDirect);    // 1-D

  p.mutable_selection()->add_exclude("*.norm");
  EXPECT_EQ(ResolveTensorSettings(p, "x.norm", big).selection, Selection::kDirect);
  auto* o = p.add_overrides();
  o->set_glob("x.norm");
  o->set_enabled(true);
  EXPECT_EQ(ResolveTensorSettings(p, "x.norm", big).selection, Selection::kTransform);

  p.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  p.mutable_selection()->add_include("layers.*");
  EXPECT_EQ(ResolveTensorSettings(p, "layers.0.w", big).selection, Selection::kTransform);
  EXPECT_EQ(ResolveTensorSettings(p, "head", big).selection, Selection::kDirect);
}

gift::v1::CodecSpec Codec(const char* text) { return codec::ToProto(*codec::ParseCodecSpec(text)); }

std::string Name(const gift::v1::CodecSpec& spec) {
  return codec::ToString(*codec::FromProto(spec));
}

TEST(ResolveTest, CodecsGlobalForTransformableBf16ForTheRest) {
  gift::v1::Policy p = Defaults();
  const std::vector<int64_t> big = {256, 256}, small = {32, 32}, vec = {512}, row = {1, 512};
  for (const auto& shape : {big, small}) {
    const TensorSettings s = ResolveTensorSettings(p, "w", shape);
    EXPECT_EQ(Name(s.transform.push_codec()), "e4m3/block128");
    EXPECT_EQ(Name(s.transform.pull_codec()), Name(p.transform().pull_codec()));
  }
  for (const auto& shape : {vec, row}) {  // not transformable: bf16 both ways
    const TensorSettings s = ResolveTensorSettings(p, "b", shape);
    EXPECT_EQ(Name(s.transform.push_codec()), "bf16");
    EXPECT_EQ(Name(s.transform.pull_codec()), "bf16");
  }
  // A global fp32 codec stays fp32 for every tensor (nothing is narrowed).
  *p.mutable_transform()->mutable_push_codec() = Codec("fp32");
  EXPECT_EQ(Name(ResolveTensorSettings(p, "b", vec).transform.push_codec()), "fp32");
  EXPECT_EQ(Name(ResolveTensorSettings(p, "b", vec).transform.pull_codec()), "bf16");
}

TEST(ResolveTest, StatisticsTensorsTakeTheStatisticsCodecBothWaysAndNoOverride) {
  gift::v1::Policy p = Defaults();
  EXPECT_EQ(Name(p.transform().statistics_codec()), "bf16");  // the default
  *p.mutable_transform()->mutable_statistics_codec() = Codec("e4m3/block128/sr");
  auto* o = p.add_overrides();
  o->set_glob("layers.*");  // matches the statistics tensor's name too
  *o->mutable_push_codec() = Codec("nvfp4");
  *o->mutable_pull_codec() = Codec("nvfp4");
  ASSERT_TRUE(Validate(p).ok()) << Validate(p);
  const std::vector<int64_t> shape = {1, 97, 128};
  const TensorSettings s = ResolveTensorSettings(p, "layers.0.w#sketch.both", shape);
  EXPECT_EQ(Name(s.transform.push_codec()), "e4m3/block128/sr");
  EXPECT_EQ(Name(s.transform.pull_codec()), "e4m3/block128/sr");
  EXPECT_FALSE(s.push_codec_overridden);
  EXPECT_EQ(s.selection, Selection::kDirect);
  // The gradient itself keeps the override.
  EXPECT_EQ(Name(ResolveTensorSettings(p, "layers.0.w", {256, 256}).transform.push_codec()),
            "nvfp4");
}

TEST(ResolveTest, StatisticsColumnsAreTheGlobalOnesThenTheLastMatchingOverrides) {
  gift::v1::Policy p = Defaults();
  EXPECT_EQ(p.transform().statistics_columns(), kDefaultStatisticsColumns);
  p.mutable_transform()->set_statistics_columns(96);
  auto* a = p.add_overrides();
  a->set_glob("layers.*");
  a->set_statistics_columns(64);
  auto* b = p.add_overrides();
  b->set_glob("*.attn.*");
  b->set_statistics_columns(32);
  p.add_overrides()->set_glob("*.attn.q");  // says nothing about columns
  p.mutable_overrides(2)->set_rank(16);
  ASSERT_TRUE(Validate(p).ok()) << Validate(p);
  const std::vector<int64_t> shape = {256, 256};
  EXPECT_EQ(ResolveTensorSettings(p, "head", shape).transform.statistics_columns(), 96u);
  EXPECT_EQ(ResolveTensorSettings(p, "layers.0.mlp.up", shape).transform.statistics_columns(), 64u);
  EXPECT_EQ(ResolveTensorSettings(p, "layers.0.attn.q", shape).transform.statistics_columns(), 32u);
}

TEST(PolicyDefaultsTest, StatisticsCodecIsBf16OrFp32WithAnFp32PullAndASetOneIsKept) {
  gift::v1::Policy p;
  *p.mutable_transform()->mutable_pull_codec() = Codec("fp32");
  EXPECT_EQ(Name(WithDefaults(p).transform().statistics_codec()), "fp32");
  *p.mutable_transform()->mutable_statistics_codec() = Codec("e4m3/block128");
  EXPECT_EQ(Name(WithDefaults(p).transform().statistics_codec()), "e4m3/block128");
}

TEST(ResolveTest, CodecOverridesLastMatchWinsPerDirection) {
  gift::v1::Policy p = Defaults();
  auto* a = p.add_overrides();
  a->set_glob("layers.*");
  *a->mutable_push_codec() = Codec("nvfp4");
  *a->mutable_pull_codec() = Codec("e4m3/block128");
  auto* b = p.add_overrides();
  b->set_glob("*.mlp.*");
  *b->mutable_pull_codec() = Codec("nvfp4");
  auto* c = p.add_overrides();
  c->set_glob("*.norm");
  *c->mutable_push_codec() = Codec("e4m3/block32");
  ASSERT_TRUE(Validate(p).ok()) << Validate(p);

  const std::vector<int64_t> big = {256, 256}, vec = {256};
  const TensorSettings mlp = ResolveTensorSettings(p, "layers.0.mlp.up", big);
  EXPECT_EQ(Name(mlp.transform.push_codec()), "nvfp4");  // kept from the first match
  EXPECT_EQ(Name(mlp.transform.pull_codec()), "nvfp4");  // the last match wins
  const TensorSettings attn = ResolveTensorSettings(p, "layers.0.attn.q", big);
  EXPECT_EQ(Name(attn.transform.push_codec()), "nvfp4");
  EXPECT_EQ(Name(attn.transform.pull_codec()), "e4m3/block128");
  // An override names codecs for 1-D tensors too; an unset direction stays bf16.
  const TensorSettings norm = ResolveTensorSettings(p, "final.norm", vec);
  EXPECT_EQ(Name(norm.transform.push_codec()), "e4m3/block32");
  EXPECT_EQ(Name(norm.transform.pull_codec()), "bf16");
  const TensorSettings head = ResolveTensorSettings(p, "head", big);
  EXPECT_EQ(Name(head.transform.push_codec()), "e4m3/block128");
  // Codec overrides leave the selection alone.
  EXPECT_EQ(mlp.selection, Selection::kMeasure);
}

TEST(PolicyHierarchyTest, DefaultsToNoneAndRefusesErrorFeedbackWithNode) {
  EXPECT_EQ(Defaults().hierarchy(), gift::v1::HIERARCHY_NONE);
  gift::v1::Policy p = Defaults();
  p.set_hierarchy(gift::v1::HIERARCHY_NODE);
  EXPECT_TRUE(Validate(p).ok());
  p.mutable_transform()->set_error_feedback(true);
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("transform.error_feedback"));
  p.mutable_transform()->set_error_feedback(false);
  gift::v1::TensorOverride* o = p.add_overrides();
  o->set_glob("layers.*");
  o->set_error_feedback(true);
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("overrides[0].error_feedback"));
  p.set_hierarchy(gift::v1::HIERARCHY_NONE);
  EXPECT_TRUE(Validate(p).ok());  // error feedback is fine without node groups
  p.set_hierarchy(static_cast<gift::v1::Hierarchy>(7));
  EXPECT_THAT(std::string(Validate(p).message()), HasSubstr("hierarchy = 7"));
}

}  // namespace
}  // namespace gift::policy

namespace gift::policy {
namespace {

std::string CodecText(const gift::v1::CodecSpec& spec) {
  return codec::ToString(codec::FromProto(spec).value());
}

TEST(PolicyTargetTest, DefaultsToE4m3Block128AmongE4m3AndTheNvfp4Codecs) {
  const gift::v1::Policy p = WithDefaults(gift::v1::Policy());
  EXPECT_FALSE(p.selection().target_off());
  EXPECT_EQ(CodecText(p.selection().target()), "e4m3/block128");
  std::vector<std::string> codecs;
  for (const auto& c : p.selection().target_codecs()) codecs.push_back(CodecText(c));
  EXPECT_EQ(codecs, (std::vector<std::string>{"e4m3/block128", "nvfp4", "nvfp4/mse"}));
  EXPECT_TRUE(Validate(p).ok());
}

TEST(PolicyTargetTest, OffKeepsNoTargetAndSetValuesAreKept) {
  gift::v1::Policy off;
  off.mutable_selection()->set_target_off(true);
  off = WithDefaults(off);
  EXPECT_FALSE(off.selection().has_target());
  EXPECT_TRUE(off.selection().target_codecs().empty());
  EXPECT_TRUE(Validate(off).ok());

  gift::v1::Policy set;
  *set.mutable_selection()->mutable_target() =
      codec::ToProto(codec::ParseCodecSpec("e5m2/tensor").value());
  *set.mutable_selection()->add_target_codecs() =
      codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
  set = WithDefaults(set);
  EXPECT_EQ(CodecText(set.selection().target()), "e5m2/tensor");
  ASSERT_EQ(set.selection().target_codecs_size(), 1);
  EXPECT_TRUE(Validate(set).ok());
}

TEST(PolicyTargetTest, ValidateNamesABadTargetOrCandidate) {
  gift::v1::Policy p = WithDefaults(gift::v1::Policy());
  p.mutable_selection()->mutable_target()->set_block_size(7);
  absl::Status s = Validate(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("selection.target"), std::string::npos) << s;
  p = WithDefaults(gift::v1::Policy());
  p.mutable_selection()->mutable_target_codecs(1)->set_block_size(7);
  s = Validate(p);
  EXPECT_NE(s.message().find("selection.target_codecs[1]"), std::string::npos) << s;
  p = WithDefaults(gift::v1::Policy());
  for (int i = 0; i < 8; ++i) *p.mutable_selection()->add_target_codecs() = p.selection().target();
  s = Validate(p);
  EXPECT_NE(s.message().find("at most 8"), std::string::npos) << s;
}

TEST(PolicyTargetTest, AnOverridesPushCodecIsMarked) {
  gift::v1::Policy p = WithDefaults(gift::v1::Policy());
  EXPECT_FALSE(ResolveTensorSettings(p, "a.w", {64, 64}).push_codec_overridden);
  gift::v1::TensorOverride* o = p.add_overrides();
  o->set_glob("a.*");
  *o->mutable_pull_codec() = codec::ToProto(codec::ParseCodecSpec("bf16").value());
  EXPECT_FALSE(ResolveTensorSettings(p, "a.w", {64, 64}).push_codec_overridden);
  *o->mutable_push_codec() = codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
  EXPECT_TRUE(ResolveTensorSettings(p, "a.w", {64, 64}).push_codec_overridden);
  EXPECT_FALSE(ResolveTensorSettings(p, "b.w", {64, 64}).push_codec_overridden);
}

}  // namespace
}  // namespace gift::policy
