// Per-op costs of the step model read from gift-bench JSON
// (bench/model_costs.h), on documents shaped like what codec, transform and
// cluster write.
#include "bench/model_costs.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json CodecDoc() {
  json ops = json::array();
  auto op = [&](const char* spec, const char* name, int threads, double gbps) {
    ops.push_back({{"spec", spec}, {"op", name}, {"threads", threads}, {"input_gbps", gbps}});
  };
  op("e4m3/block128", "encode", 1, 7);
  op("e4m3/block128", "encode", 2, 12);
  op("bf16", "decode", 1, 14);
  op("bf16", "decode", 2, 20);
  op("e4m3/block128", "decode-acc", 2, 11);
  return {{"command", "codec"}, {"cpu", {{"ops", ops}}}};
}

TEST(ModelCosts, CodecRatesAtTheChosenThreadCount) {
  MeasuredCosts c;
  ASSERT_TRUE(c.Add(CodecDoc(), "codec.json").ok());
  // Largest thread count by default; specs match whatever their spelling.
  EXPECT_DOUBLE_EQ(*c.Encode("e4m3/block128"), 12e9);
  EXPECT_DOUBLE_EQ(*c.Encode("e4m3/block128/rne"), 12e9);
  EXPECT_DOUBLE_EQ(*c.Decode("bf16"), 20e9);
  EXPECT_DOUBLE_EQ(*c.DecodeAccumulate("e4m3/block128"), 11e9);
  EXPECT_FALSE(c.Encode("bf16").has_value());
  ASSERT_EQ(c.sources.size(), 1u);
  EXPECT_THAT(c.sources[0], HasSubstr("codec.json"));

  MeasuredCosts one;
  ASSERT_TRUE(one.Add(CodecDoc(), "codec.json", /*threads=*/1).ok());
  EXPECT_DOUBLE_EQ(*one.Encode("e4m3/block128"), 7e9);
  EXPECT_FALSE(one.DecodeAccumulate("e4m3/block128").has_value());
  EXPECT_FALSE(MeasuredCosts().Add(CodecDoc(), "codec.json", /*threads=*/8).ok());
}

TEST(ModelCosts, TransformMedianOverShapes) {
  json shapes = json::array();
  for (double g : {10.0, 30.0, 20.0}) {
    shapes.push_back({{"cpu",
                       {{{"threads", 1}, {"forward_gflops", g / 2}, {"inverse_gflops", g / 2}},
                        {{"threads", 2}, {"forward_gflops", g}, {"inverse_gflops", g + 1}}}}});
  }
  const json doc = {{"command", "transform"}, {"config", {{"rank", 32}}}, {"shapes", shapes}};
  MeasuredCosts c;
  ASSERT_TRUE(c.Add(doc, "t.json").ok());
  EXPECT_DOUBLE_EQ(*c.transform_forward_flops, 20e9);
  EXPECT_DOUBLE_EQ(*c.transform_inverse_flops, 21e9);
  EXPECT_EQ(*c.transform_rank, 32);
  MeasuredCosts one;
  ASSERT_TRUE(one.Add(doc, "t.json", 1).ok());
  EXPECT_DOUBLE_EQ(*one.transform_forward_flops, 10e9);
}

TEST(ModelCosts, ClusterReducerPerPush) {
  const json doc = {{"reducer",
                     {{"ran", true},
                      {"ranks", 4},
                      {"gbps_fp32_out", 2.5},
                      {"push_codec", "e4m3/block128"}}}};
  MeasuredCosts c;
  ASSERT_TRUE(c.Add(doc, "cluster.json").ok());
  EXPECT_DOUBLE_EQ(*c.Reducer("e4m3/block128"), 10e9);
  EXPECT_FALSE(c.DecodeAccumulate("e4m3/block128").has_value());
  json skipped = doc;
  skipped["reducer"]["ran"] = false;
  EXPECT_FALSE(MeasuredCosts().Add(skipped, "cluster.json").ok());
}

TEST(ModelCosts, RefusesOtherDocuments) {
  MeasuredCosts c;
  absl::Status s = c.Add(json{{"command", "fidelity"}}, "f.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("f.json"));
  // A codec document without its ops.
  s = c.Add(json{{"command", "codec"}, {"cpu", json::object()}}, "c.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadCosts({"/nonexistent/x.json"}, 0, c).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gift::bench
