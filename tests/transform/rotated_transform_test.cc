// The rotation after a transform (RotatedTransform, the policy's
// transform.rotation_block): its inverse is exact to FP32 rounding, two
// workers that build it for one shape compute the same bits, its rows stream
// with the inner transform's bits, and the servers' sum of rotated NVFP4
// contributions is the rotated exact sum within the codec's bound. (What the
// rotation does to the error is measured on real gradients, by gift-bench
// fidelity --rotate-block over this class: docs/fidelity.md.)
#include "common/transform/rotated_transform.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/base/relative_error.h"
#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "common/transform/encoder_pipeline.h"
#include "common/transform/hadamard_transform.h"
#include "common/transform/identity_transform.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using testing::Identity;
using testing::SameBits;

std::shared_ptr<const RotatedTransform> Rotated(std::shared_ptr<const GradientTransform> inner,
                                                int64_t block) {
  auto t = RotatedTransform::Create(std::move(inner), block);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

// Gradients whose columns differ in scale by orders of magnitude (a
// log-normal scale per column): 16-element blocks of very different
// elements.
std::vector<float> WideRangeRows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scale(cols);
  for (float& s : scale) s = std::exp(2.0f * normal(rng));
  std::vector<float> g(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) g[i * cols + j] = scale[j] * normal(rng);
  }
  return g;
}

TEST(RotatedTransform, InverseIsExactToFp32RoundingForTheIdentityAndABasis) {
  constexpr int64_t d_out = 48, d_in = 128;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 5);
  for (const auto& inner :
       {Identity(d_out, d_in), std::shared_ptr<const GradientTransform>(
                                   testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 7))}) {
    for (int64_t block : {2, 16, 32, 128}) {
      auto t = Rotated(inner, block);
      ASSERT_NE(t, nullptr);
      std::vector<float> x(g.size()), back(g.size());
      ASSERT_TRUE(t->Forward(g.data(), d_out, d_in, x.data()).ok());
      ASSERT_TRUE(t->Inverse(x.data(), d_out, d_in, back.data()).ok());
      EXPECT_LE(RelativeL2(back, g), 1e-6) << t->name();
      // The rotation really rotates: X differs from the inner transform's.
      std::vector<float> plain(g.size());
      ASSERT_TRUE(inner->Forward(g.data(), d_out, d_in, plain.data()).ok());
      EXPECT_GT(RelativeL2(x, plain), 0.1) << t->name();
    }
  }
}

TEST(RotatedTransform, OfTheIdentityIsTheHadamardRotationBitForBit) {
  constexpr int64_t d_out = 5, d_in = 96;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 8);
  auto t = Rotated(Identity(d_out, d_in), 32);
  auto h = HadamardTransform::Create(d_out, d_in, {.block = 32});
  ASSERT_TRUE(h.ok());
  std::vector<float> a(g.size()), b(g.size());
  ASSERT_TRUE(t->Forward(g.data(), d_out, d_in, a.data()).ok());
  ASSERT_TRUE(h->Forward(g.data(), d_out, d_in, b.data()).ok());
  EXPECT_TRUE(SameBits(a, b));
  ASSERT_TRUE(t->Inverse(a.data(), d_out, d_in, a.data()).ok());
  ASSERT_TRUE(h->Inverse(b.data(), d_out, d_in, b.data()).ok());
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_EQ(t->name(), "identity+hadamard(block=32)");
}

TEST(RotatedTransform, TwoWorkersBuildingItComputeTheSameBitsAndRowsStreamAlike) {
  constexpr int64_t d_out = 700, d_in = 96;  // more than two of the basis's row blocks
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 9);
  const auto basis = testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 11);
  auto mine = Rotated(basis, 16);
  auto theirs = Rotated(testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 11), 16);
  std::vector<float> a(g.size()), b(g.size());
  ASSERT_TRUE(mine->Forward(g.data(), d_out, d_in, a.data()).ok());
  ASSERT_TRUE(theirs->Forward(g.data(), d_out, d_in, b.data()).ok());
  EXPECT_TRUE(SameBits(a, b));
  EXPECT_EQ(mine->rotation().signs(), theirs->rotation().signs());

  // Streamed in the inner transform's row blocks, last block first.
  ASSERT_EQ(mine->forward_row_block(), basis->forward_row_block());
  ASSERT_LT(mine->forward_row_block(), d_out);
  std::vector<float> streamed(g.size(), -1.0f);
  std::unique_ptr<ForwardRowsState> state;
  auto written = mine->BeginForward(g.data(), streamed.data(), &state);
  ASSERT_TRUE(written.ok()) << written.status();
  const int64_t step = mine->forward_row_block();
  for (int64_t row0 = (d_out - 1) / step * step; row0 >= *written; row0 -= step) {
    ASSERT_TRUE(
        mine->ForwardRows(*state, g.data(), row0, std::min(d_out, row0 + step), streamed.data())
            .ok());
  }
  EXPECT_TRUE(SameBits(streamed, a));
}

TEST(RotatedTransform, ServersSumOfRotatedContributionsIsTheRotatedSumWithinTheCodecBound) {
  constexpr int64_t d_out = 64, d_in = 256, kWorkers = 4;
  const codec::CodecSpec spec = codec::ParseCodecSpec("nvfp4").value();
  const auto t = Rotated(testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 13), 16);
  std::vector<std::vector<float>> grads;
  std::vector<codec::EncodedTensor> payloads;
  std::vector<float> rotated_sum(d_out * d_in, 0.0f), exact(d_out * d_in, 0.0f);
  double bound = 0.0;  // sum over workers of ||Q(R T G_i) - R T G_i||_F
  for (int64_t w = 0; w < kWorkers; ++w) {
    grads.push_back(WideRangeRows(d_out, d_in, 100 + w));
    auto pipeline = EncoderPipeline::Create(t, {.spec = spec});
    ASSERT_TRUE(pipeline.ok());
    auto payload =
        pipeline->Encode(grads.back().data(), {.tensor = 1, .step = 1, .rank = uint32_t(w)});
    ASSERT_TRUE(payload.ok()) << payload.status();
    std::vector<float> x(d_out * d_in), decoded(d_out * d_in);
    ASSERT_TRUE(t->Forward(grads.back().data(), d_out, d_in, x.data()).ok());
    ASSERT_TRUE(codec::Decode(payload->view(), decoded.data()).ok());
    double err = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += double(decoded[i] - x[i]) * double(decoded[i] - x[i]);
      rotated_sum[i] += x[i];
      exact[i] += grads.back()[i];
    }
    bound += std::sqrt(err);
    payloads.push_back(*std::move(payload));
  }
  // The servers: decode and sum in FP32, in the rotated coordinates.
  std::vector<codec::EncodedView> views;
  for (const auto& p : payloads) views.push_back(p.view());
  std::vector<float> sum(d_out * d_in);
  ASSERT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f, codec::MutableEncodedView{}).ok());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < sum.size(); ++i) {
    diff += double(sum[i] - rotated_sum[i]) * double(sum[i] - rotated_sum[i]);
    norm += double(rotated_sum[i]) * double(rotated_sum[i]);
  }
  EXPECT_LE(std::sqrt(diff), bound * (1 + 1e-5) + 1e-6 * std::sqrt(norm));
  // One inverse after the pull gives the exact sum's neighbourhood.
  std::vector<float> back(sum.size());
  ASSERT_TRUE(t->Inverse(sum.data(), d_out, d_in, back.data()).ok());
  EXPECT_LT(RelativeL2(back, exact), 0.5);
}

TEST(RotatedTransform, RefusesBadBlocks) {
  const auto identity = Identity(4, 96);
  EXPECT_EQ(RotatedTransform::Create(nullptr, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int64_t block : {0, 1, 3, 24, 64 /* does not divide 96 */, 512}) {
    EXPECT_EQ(RotatedTransform::Create(identity, block).status().code(),
              absl::StatusCode::kInvalidArgument)
        << block;
  }
  // Non-finite input: refused by the forward and by the inverse.
  auto t = Rotated(identity, 32);
  std::vector<float> g(4 * 96, 1.0f), out(g.size());
  g[7] = std::nanf("");
  EXPECT_EQ(t->Forward(g.data(), 4, 96, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Inverse(g.data(), 4, 96, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
