// NVFP4 with least-squares block scales ("nvfp4/mse", BlockScaleFit::
// kLeastSquares): an encoder-only choice among the amax scale code and the
// few codes below it, decoded like any NVFP4 tensor.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/scalar.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::codec {
namespace {

struct FitRoundTrip {
  EncodedTensor tensor;
  std::vector<float> decoded;
};

FitRoundTrip EncodeDecode(const std::string& spec, const std::vector<float>& x, uint64_t rows,
                          uint64_t cols) {
  auto t = EncodedTensor::Create(testing::Spec(spec), rows, cols).value();
  EXPECT_TRUE(Encode(x.data(), t.mutable_view(), {1, 2, 3}).ok());
  std::vector<float> y(x.size());
  EXPECT_TRUE(Decode(t.view(), y.data()).ok());
  return {std::move(t), std::move(y)};
}

// The squared error of block b (16 elements of a row, or the row's short tail).
double BlockSquaredError(const std::vector<float>& x, const std::vector<float>& y, uint64_t cols,
                         uint64_t block) {
  const uint64_t per_row = (cols + 15) / 16;
  const uint64_t row = block / per_row, c0 = (block % per_row) * 16;
  double err = 0.0;
  for (uint64_t c = c0; c < std::min(cols, c0 + 16); ++c) {
    const double d = static_cast<double>(y[row * cols + c]) - x[row * cols + c];
    err += d * d;
  }
  return err;
}

TEST(Nvfp4FitTest, EveryBlockKeepsTheBetterOfItsCandidateScales) {
  constexpr uint64_t kRows = 37, kCols = 1000;  // a short last block per row
  const std::vector<float> x = testing::GradientLike(kRows, kCols, 5);
  const FitRoundTrip amax = EncodeDecode("nvfp4", x, kRows, kCols);
  const FitRoundTrip fit = EncodeDecode("nvfp4/mse", x, kRows, kCols);
  const uint64_t blocks = amax.tensor.layout().num_blocks;
  // Same tensor scale; each block code is the amax code or one of the three below.
  const std::vector<uint8_t>& a = amax.tensor.scales();
  const std::vector<uint8_t>& f = fit.tensor.scales();
  ASSERT_EQ(std::vector<uint8_t>(a.begin() + blocks, a.end()),
            std::vector<uint8_t>(f.begin() + blocks, f.end()));
  int lowered = 0;
  double sum_amax = 0.0, sum_fit = 0.0;
  for (uint64_t b = 0; b < blocks; ++b) {
    ASSERT_LE(f[b], a[b]) << "block " << b;
    ASSERT_GE(f[b] + scalar::kNvfp4FitCandidates, a[b] + 1u) << "block " << b;
    if (a[b] != 0) ASSERT_GE(f[b], 1) << "a nonzero block keeps a nonzero scale";
    const double ea = BlockSquaredError(x, amax.decoded, kCols, b);
    const double ef = BlockSquaredError(x, fit.decoded, kCols, b);
    // The choice compares FP32 sums; in double a near tie may tip by rounding.
    EXPECT_LE(ef, ea * (1.0 + 1e-5) + 1e-30) << "block " << b;
    lowered += f[b] < a[b];
    sum_amax += ea;
    sum_fit += ef;
  }
  EXPECT_GT(lowered, static_cast<int>(blocks / 4));
  // Gaussian blocks: about 13 % less squared error (docs/fidelity.md).
  EXPECT_LT(sum_fit, 0.93 * sum_amax) << sum_fit / sum_amax;
}

TEST(Nvfp4FitTest, AClippedElementStaysWithinTheBound) {
  // Fifteen elements at 5/6 of the block's largest: with the amax scale
  // they sit at 5, halfway between E2M1's 4 and 6; a lower scale clips the
  // largest element to 6 x scale and brings the others close to it.
  std::vector<float> x(16);
  for (int c = 0; c < 16; ++c) x[c] = c % 2 ? -5.0f : 5.0f;
  x[7] = 6.0f;
  const FitRoundTrip fit = EncodeDecode("nvfp4/mse", x, 1, 16);
  const FitRoundTrip amax = EncodeDecode("nvfp4", x, 1, 16);
  ASSERT_LT(fit.tensor.scales()[0], amax.tensor.scales()[0]);
  EXPECT_LT(fit.decoded[7], x[7]) << "the largest element is clipped";
  EXPECT_LT(BlockSquaredError(x, fit.decoded, 16, 0), BlockSquaredError(x, amax.decoded, 16, 0));
  for (uint64_t c = 0; c < 16; ++c) {
    EXPECT_LE(std::fabs(fit.decoded[c] - x[c]), EncodedErrorBound(fit.tensor.view(), 0, c, x[c]))
        << c;
  }
}

TEST(Nvfp4FitTest, ZerosAndTinyBlocksStayExactOrNonzero) {
  std::vector<float> x(48, 0.0f);
  x[17] = 1e-30f;  // block 1 alone: the smallest nonzero scale code
  x[40] = -3.0f;
  const FitRoundTrip fit = EncodeDecode("nvfp4/mse", x, 1, 48);
  EXPECT_EQ(fit.tensor.scales()[0], 0);  // an all-zero block keeps scale 0
  EXPECT_GE(fit.tensor.scales()[1], 1);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(fit.decoded[c], 0.0f);
  EXPECT_EQ(fit.decoded[40], -3.0f);  // the tensor's amax is exact
}

TEST(Nvfp4FitTest, IsAnNvfp4OnlyEncoderOption) {
  EXPECT_EQ(ToString(testing::Spec("nvfp4/sr/mse")), "nvfp4/mse/sr");
  EXPECT_EQ(testing::Spec("nvfp4/mse").block_scale_fit, BlockScaleFit::kLeastSquares);
  for (const char* bad : {"e4m3/block32/mse", "e5m2/tensor/mse", "bf16/mse", "fp32/mse"}) {
    EXPECT_FALSE(ParseCodecSpec(bad).ok()) << bad;
  }
  CodecSpec odd = testing::Spec("nvfp4");
  odd.block_scale_fit = static_cast<BlockScaleFit>(7);
  EXPECT_FALSE(Validate(odd).ok());
}

}  // namespace
}  // namespace gift::codec
