// The owner's choice of codecs under the fidelity target (wire_choice.h):
// the pairs it measures, and the choice on gradients whose errors are known
// by construction: one NVFP4 carries exactly (the 4-bit pair wins on
// bytes), one no 4-bit codec carries within E4M3's error (the target stays),
// and the statistics and basis bytes that count against a basis.
#include "worker/owner/wire_choice.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/codec/payload.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transform/tensor_geometry.h"
#include "tests/worker/nvfp4_grid.h"

namespace gift::worker {
namespace {

constexpr int64_t kRows = 64, kCols = 128;
constexpr double kAnyBudget = std::numeric_limits<double>::infinity();

codec::CodecSpec Spec(const char* text) { return codec::ParseCodecSpec(text).value(); }

gift::v1::Policy DefaultPolicy() { return policy::WithDefaults(gift::v1::Policy()); }

policy::TensorSettings Settings(const gift::v1::Policy& p) {
  return policy::ResolveTensorSettings(p, "layers.0.w", {kRows, kCols});
}

TEST(TargetPairsTest, TargetFirstThenEachCodecWithThePullAndWithItself) {
  const gift::v1::Policy p = DefaultPolicy();
  auto pairs = TargetPairs(p, Settings(p));
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  // (e4m3, e4m3), (nvfp4, e4m3), (nvfp4, nvfp4), (nvfp4/mse, e4m3), (nvfp4/mse, nvfp4/mse).
  ASSERT_EQ(pairs->size(), 5u);
  const codec::CodecSpec e4m3 = Spec("e4m3/block128");
  EXPECT_EQ((*pairs)[0].push, e4m3);
  EXPECT_EQ(*(*pairs)[0].pull, e4m3);
  EXPECT_EQ((*pairs)[1].push, Spec("nvfp4"));
  EXPECT_EQ(*(*pairs)[1].pull, e4m3);
  EXPECT_EQ(*(*pairs)[2].pull, Spec("nvfp4"));
  EXPECT_EQ((*pairs)[3].push, Spec("nvfp4/mse"));
  EXPECT_EQ(*(*pairs)[4].pull, Spec("nvfp4/mse"));
  EXPECT_EQ(PairLabel((*pairs)[2]), "nvfp4 / nvfp4");
}

std::vector<float> Gaussian(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> g(kRows * kCols);
  for (float& x : g) x = normal(rng);
  return g;
}

TEST(ChooseWireTest, AGradientNvfp4CarriesExactlyTravelsInFourBitsBothWays) {
  const gift::v1::Policy p = DefaultPolicy();
  const auto pairs = TargetPairs(p, Settings(p)).value();
  const std::vector<float> g = test::Nvfp4Grid(kRows, kCols, 3);
  auto choice = ChooseWire(
      pairs, {}, {.own = g.data(), .rows = kRows, .cols = kCols, .compute_budget = kAnyBudget});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_GT(choice->target_error, 0.01);
  EXPECT_LT(choice->error, 1e-5);
  EXPECT_LT(choice->cheaper_gap, 1e-3);
  EXPECT_EQ(choice->pair, 2);  // nvfp4 both ways: the fewest bytes (first of the equal ones)
  EXPECT_EQ(choice->candidate, -1);
  // Bytes: NVFP4 is 4.5 bits per element with its block scales, E4M3
  // block-128 8.25; both ways, plus each payload's header.
  EXPECT_LT(choice->bytes_per_step, 0.56 * choice->target_bytes_per_step);
  EXPECT_GT(choice->bytes_per_step, 0.54 * choice->target_bytes_per_step);
}

TEST(ChooseWireTest, GaussianGradientStaysAtTheTarget) {
  const gift::v1::Policy p = DefaultPolicy();
  const auto pairs = TargetPairs(p, Settings(p)).value();
  const std::vector<float> g = Gaussian(4);
  auto choice = ChooseWire(
      pairs, {}, {.own = g.data(), .rows = kRows, .cols = kCols, .compute_budget = kAnyBudget});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->pair, 0);
  EXPECT_EQ(choice->candidate, -1);
  EXPECT_GT(choice->target_error, 0.0);
  EXPECT_EQ(choice->error, choice->target_error);
  EXPECT_EQ(choice->bytes_per_step, choice->target_bytes_per_step);
  // Every cheaper way is well above the target's error.
  EXPECT_GT(choice->cheaper_gap, 1.2);
}

TEST(ChooseWireTest, StatisticsCountOnEveryOptionAndABasisLosesAtEqualError) {
  // The same kind of gradient with a basis candidate: through the basis
  // NVFP4 is no longer exact and costs more bytes, so direct wins.
  const gift::v1::Policy p = DefaultPolicy();
  const auto pairs = TargetPairs(p, Settings(p)).value();
  const std::vector<float> g = test::Nvfp4Grid(kRows, kCols, 5);
  auto geometry = transform::TensorGeometry::Create(kRows, kCols, {}).value();
  ASSERT_TRUE(geometry.AddReducedGradient(g.data()).ok());
  auto basis = geometry.BuildBasis({.tensor_id = 1, .version = 1, .power = 0.25, .rank = 8});
  ASSERT_TRUE(basis.ok()) << basis.status();
  const WireCandidate candidates[] = {
      {.basis = std::make_shared<const transform::TensorBasisTransform>(*std::move(basis)),
       .label = "p=0.25",
       .basis_bytes = 100000,
       .compute_seconds = 0.001}};
  auto choice = ChooseWire(pairs, candidates,
                           {.own = g.data(),
                            .rows = kRows,
                            .cols = kCols,
                            .statistics_bytes = 4000,
                            .refresh_period = 10,
                            .compute_budget = kAnyBudget});
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->candidate, -1);
  EXPECT_EQ(choice->pair, 2);
  // Direct carries the statistics too (the source still collects them, at
  // the collect period and stride 1), but no basis bytes.
  const uint64_t dims[] = {kRows, kCols};
  const uint64_t nvfp4 = codec::PayloadSizeFor(Spec("nvfp4"), dims).value();
  const uint64_t e4m3 = codec::PayloadSizeFor(Spec("e4m3/block128"), dims).value();
  EXPECT_DOUBLE_EQ(choice->bytes_per_step, 2.0 * nvfp4 + 4000);
  EXPECT_DOUBLE_EQ(choice->target_bytes_per_step, 2.0 * e4m3 + 4000);
}

}  // namespace
}  // namespace gift::worker
