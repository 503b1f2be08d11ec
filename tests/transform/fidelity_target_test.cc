// The fidelity target's choice on hand-computed options (fidelity_target.h),
// the wire bytes of one way to travel, and the measurement of codec pairs
// (transform_selector.h MeasureCodecPairs) against SelectTransform's.
#include "common/transform/fidelity_target.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/codec/codec_spec.h"
#include "common/transform/identity_transform.h"
#include "common/transform/transform_selector.h"

namespace gift::transform {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ChooseWireOptionTest, FewestBytesWithinTheTarget) {
  // The target direct (E4M3 both ways: 2 MB, error 0.030), NVFP4 direct (too
  // coarse), NVFP4 through a basis (within the target, fewest bytes), E4M3
  // through a basis (within, but more bytes than the 4-bit one).
  const WireOption options[] = {{.error = 0.030, .bytes_per_step = 2.0e6},
                                {.error = 0.110, .bytes_per_step = 1.1e6},
                                {.error = 0.029, .bytes_per_step = 1.2e6, .compute_seconds = 0.01},
                                {.error = 0.012, .bytes_per_step = 2.1e6, .compute_seconds = 0.01}};
  EXPECT_EQ(ChooseWireOption(options, 0.030, kInf).value(), 2);
  // Target exactly met counts (<=).
  EXPECT_EQ(ChooseWireOption(options, 0.029, kInf).value(), 2);
  // A tighter target than the 4-bit basis reaches: the target's own bytes
  // are not eligible either (0.030 > 0.020), so the E4M3 basis.
  EXPECT_EQ(ChooseWireOption(options, 0.020, kInf).value(), 3);
  // Nothing meets 0.010.
  EXPECT_EQ(ChooseWireOption(options, 0.010, kInf).value(), -1);
}

TEST(ChooseWireOptionTest, ComputeBudgetExcludesTransformsAndTiesGoToLessCompute) {
  const WireOption options[] = {{.error = 0.030, .bytes_per_step = 2.0e6},
                                {.error = 0.029, .bytes_per_step = 1.2e6, .compute_seconds = 0.02},
                                {.error = 0.025, .bytes_per_step = 1.2e6, .compute_seconds = 0.01},
                                {.error = 0.028, .bytes_per_step = 1.2e6, .compute_seconds = 0.01}};
  // Equal bytes: the lower compute (index 2 before 3: equal compute, lower index).
  EXPECT_EQ(ChooseWireOption(options, 0.030, kInf).value(), 2);
  // A budget below every basis's cost leaves the target direct.
  EXPECT_EQ(ChooseWireOption(options, 0.030, 0.005).value(), 0);
  // A zero budget too.
  EXPECT_EQ(ChooseWireOption(options, 0.030, 0.0).value(), 0);
}

TEST(ChooseWireOptionTest, RefusesBadInput) {
  const WireOption good[] = {{.error = 0.03, .bytes_per_step = 1.0}};
  EXPECT_EQ(ChooseWireOption(good, -1.0, kInf).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseWireOption(good, kInf, kInf).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseWireOption(good, 0.03, std::nan("")).status().code(),
            absl::StatusCode::kInvalidArgument);
  const WireOption no_bytes[] = {{.error = 0.03, .bytes_per_step = 0.0}};
  EXPECT_EQ(ChooseWireOption(no_bytes, 0.03, kInf).status().code(),
            absl::StatusCode::kInvalidArgument);
  const WireOption nan_error[] = {{.error = std::nan(""), .bytes_per_step = 1.0}};
  EXPECT_EQ(ChooseWireOption(nan_error, 0.03, kInf).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseWireOption({}, 0.03, kInf).value(), -1);
}

TEST(WireBytesPerStepTest, AmortisesStatisticsAndBasis) {
  // 1000 + 600 payload bytes, 400 statistics bytes every 2nd step, a basis of
  // 5000 bytes every 10 steps: 1600 + 200 + 500.
  EXPECT_DOUBLE_EQ(WireBytesPerStep(1000, 600, 400, 2, 5000, 10), 2300.0);
  // Periods of 0 count as 1.
  EXPECT_DOUBLE_EQ(WireBytesPerStep(1000, 600, 400, 0, 5000, 0), 7000.0);
}

std::vector<float> Gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> g(n);
  for (float& x : g) x = scale * normal(rng);
  return g;
}

TEST(MeasureCodecPairsTest, PushOnlyPairsMatchSelectTransformAndAPullAddsError) {
  constexpr int64_t kRows = 64, kCols = 128;
  const std::vector<float> g0 = Gaussian(kRows * kCols, 1), g1 = Gaussian(kRows * kCols, 2);
  const float* grads[] = {g0.data(), g1.data()};
  const codec::CodecSpec e4m3 = codec::ParseCodecSpec("e4m3/block128").value();
  const codec::CodecSpec nvfp4 = codec::ParseCodecSpec("nvfp4").value();
  const SelectionCandidate candidates[] = {{.label = "identity",
                                            .transform = std::make_shared<IdentityTransform>(
                                                IdentityTransform::Create(kRows, kCols).value())}};
  const CodecPair pairs[] = {{.push = e4m3},
                             {.push = nvfp4},
                             {.push = e4m3, .pull = e4m3},
                             {.push = nvfp4, .pull = nvfp4}};
  const SelectorOptions options{.spec = e4m3, .tensor_id = 9, .step = 3};
  auto errors = MeasureCodecPairs(grads, kRows, kCols, candidates, pairs, options);
  ASSERT_TRUE(errors.ok()) << errors.status();
  ASSERT_EQ(errors->size(), 2u);  // direct, identity
  ASSERT_EQ((*errors)[0].size(), 4u);
  for (int p = 0; p < 2; ++p) {
    SelectorOptions single = options;
    single.spec = pairs[p].push;
    single.margin = 0.0;
    auto selection = SelectTransform(grads, kRows, kCols, candidates, single);
    ASSERT_TRUE(selection.ok()) << selection.status();
    EXPECT_DOUBLE_EQ((*errors)[0][p], selection->errors[0].rel_l2) << p;
    EXPECT_DOUBLE_EQ((*errors)[1][p], selection->errors[1].rel_l2) << p;
  }
  // The identity transform changes nothing.
  for (int p = 0; p < 4; ++p) EXPECT_DOUBLE_EQ((*errors)[0][p], (*errors)[1][p]) << p;
  // NVFP4 is coarser than E4M3; a pull in the same codec adds its own error.
  EXPECT_GT((*errors)[0][1], 2.0 * (*errors)[0][0]);
  EXPECT_GT((*errors)[0][2], (*errors)[0][0]);
  EXPECT_GT((*errors)[0][3], (*errors)[0][1]);
  EXPECT_EQ(MeasureCodecPairs(grads, kRows, kCols, candidates, {}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
