// The per-tensor encoder pipeline: bit-identity with the codec for the
// identity transform, the codec's error bound mapped back through a basis,
// error feedback (convergence of the time average, exact remap on a basis
// change, no state change on failure), and the 8-worker average through
// ReduceEncoded.
#include "common/transform/encoder_pipeline.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "common/transform/hadamard_transform.h"
#include "common/transform/identity_transform.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_transform.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using testing::Identity;
using testing::SameBits;

using codec::testing::Spec;

// ||F^p||_2 of an isotropic side: its largest model eigenvalue to the p.
double InverseSideNorm(const SideBasis& side, double p) {
  const SideBasis::Parts& parts = side.parts();
  const double top = std::max(parts.lam.maxCoeff() + parts.damping, parts.d(0));
  return std::pow(top, p);
}

TEST(EncoderPipeline, IdentityWithoutErrorFeedbackIsTheCodecBitForBit) {
  constexpr int64_t d_out = 40, d_in = 300;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 3);
  for (const std::string name :
       {"e4m3/block128", "e5m2/tensor", "nvfp4", "bf16", "e4m3/mx32", "e4m3/tensor/sr"}) {
    const codec::CodecSpec spec = Spec(name);
    auto pipeline = EncoderPipeline::Create(Identity(d_out, d_in), {.spec = spec});
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    const codec::RngKey key{.tensor = 4, .step = 9, .rank = 2};
    auto payload = pipeline->Encode(g.data(), key);
    ASSERT_TRUE(payload.ok()) << name << ": " << payload.status();

    auto direct = codec::EncodedTensor::Create(spec, d_out, d_in).value();
    ASSERT_TRUE(codec::Encode(g.data(), direct.mutable_view(), key).ok());
    EXPECT_EQ(payload->codes(), direct.codes()) << name;
    EXPECT_EQ(payload->scales(), direct.scales()) << name;

    std::vector<float> got(g.size()), want(g.size());
    ASSERT_TRUE(pipeline->Decode(payload->view(), 1.0f, got.data()).ok());
    ASSERT_TRUE(codec::Decode(direct.view(), want.data()).ok());
    EXPECT_TRUE(SameBits(got, want)) << name;
    EXPECT_TRUE(pipeline->residual().empty());
  }
}

// Through a basis T the decoded gradient is T^{-1}(decode(encode(T(G)))):
// its error is T^{-1} of the codec's error e in transformed coordinates, so
//   ||out - G||_F <= ||T^{-1}||_2 * sqrt(sum_i bound_i^2),
// bound_i the codec's per-element bound (EncodedErrorBound) and ||T^{-1}||_2
// = ||F_out^p||_2 ||F_in^p||_2 for the isotropic model, plus FP32 rounding of
// the transforms (allowed as 1e-5 ||G||).
TEST(EncoderPipeline, ThroughABasisTheErrorIsTheCodecBoundMappedBack) {
  constexpr int64_t d_out = 64, d_in = 128;
  const auto basis = testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 13);
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 14);
  for (const std::string name : {"e4m3/block128", "e5m2/tensor", "nvfp4"}) {
    auto pipeline = EncoderPipeline::Create(basis, {.spec = Spec(name)});
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    auto payload = pipeline->Encode(g.data());
    ASSERT_TRUE(payload.ok()) << payload.status();
    std::vector<float> out(g.size());
    ASSERT_TRUE(pipeline->Decode(payload->view(), 1.0f, out.data()).ok());

    // The same steps by hand give the same bits.
    std::vector<float> x(g.size()), manual(g.size());
    ASSERT_TRUE(basis->Forward(g.data(), d_out, d_in, x.data()).ok());
    auto t = codec::EncodedTensor::Create(Spec(name), d_out, d_in).value();
    ASSERT_TRUE(codec::Encode(x.data(), t.mutable_view()).ok());
    ASSERT_TRUE(codec::Decode(t.view(), manual.data()).ok());
    ASSERT_TRUE(basis->Inverse(manual.data(), d_out, d_in, manual.data()).ok());
    EXPECT_TRUE(SameBits(out, manual)) << name;

    double bound_sq = 0.0, g_sq = 0.0, err_sq = 0.0;
    for (int64_t i = 0; i < d_out; ++i) {
      for (int64_t j = 0; j < d_in; ++j) {
        const double b = codec::EncodedErrorBound(t.view(), i, j, x[i * d_in + j]);
        bound_sq += b * b;
        g_sq += double(g[i * d_in + j]) * g[i * d_in + j];
        const double e = double(out[i * d_in + j]) - g[i * d_in + j];
        err_sq += e * e;
      }
    }
    const double op_norm = InverseSideNorm(*basis->basis().output_side(), 0.25) *
                           InverseSideNorm(*basis->basis().input_side(), 0.25);
    const double bound = op_norm * std::sqrt(bound_sq) + 1e-5 * std::sqrt(g_sq);
    std::cout << "[ bound    ] " << name << ": ||out - G|| = " << std::sqrt(err_sq)
              << ", bound = " << bound << " (ratio " << std::sqrt(err_sq) / bound
              << "), rel_l2 = " << std::sqrt(err_sq / g_sq) << "\n";
    EXPECT_LE(std::sqrt(err_sq), bound) << name;
  }
}

// The row-streamed forward: Prepare writes no row of a basis's result, each
// EncodeChunk writes whole blocks of forward_row_block() rows up to its
// chunk, and every payload and residual is bit-identical to the whole-tensor
// path (the whole forward before the first chunk), with error feedback over
// two steps and chunks encoded out of order.
TEST(EncoderPipeline, RowStreamedEncodeIsBitIdenticalToTheWholeTensorPath) {
  constexpr int64_t d_out = 700, d_in = 96;  // 2 full blocks of 256 rows and a short one
  const auto basis = testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 41);
  ASSERT_EQ(basis->forward_row_block(), 256);
  const std::vector<int64_t> cuts = {0, 100, 130, 400, 512, 700};  // chunk bounds in rows
  const std::vector<size_t> order = {0, 1, 3, 2, 4};               // chunk 3 before 2
  const float kSentinel = std::numeric_limits<float>::quiet_NaN();
  for (const std::string name : {"e4m3/block128", "nvfp4"}) {
    auto streamed = EncoderPipeline::Create(basis, {.spec = Spec(name), .error_feedback = true});
    auto whole = EncoderPipeline::Create(basis, {.spec = Spec(name), .error_feedback = true});
    ASSERT_TRUE(streamed.ok() && whole.ok());
    for (uint32_t step = 0; step < 2; ++step) {
      const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 42 + step);
      std::vector<float> work_s(g.size(), kSentinel), work_w(g.size(), kSentinel);
      auto xs = streamed->Prepare(g.data(), work_s.data());
      auto xw = whole->Prepare(g.data(), work_w.data());
      ASSERT_TRUE(xs.ok() && xw.ok()) << xs.status() << xw.status();
      EXPECT_TRUE(std::isnan(work_s[0]) && std::isnan(work_s.back())) << "Prepare wrote rows";
      ASSERT_TRUE(whole->PrepareRange(0, g.size()).ok());  // the whole-tensor path
      if (step == 0) {  // no residual yet: exactly Forward's bits
        std::vector<float> forward(g.size());
        ASSERT_TRUE(basis->Forward(g.data(), d_out, d_in, forward.data()).ok());
        EXPECT_TRUE(SameBits(work_w, forward)) << name;
      }
      for (size_t k = 0; k < order.size(); ++k) {
        const size_t c = order[k];
        const uint64_t rows = cuts[c + 1] - cuts[c], offset = cuts[c] * d_in;
        const codec::RngKey key{.tensor = c, .step = step};
        auto ps = codec::EncodedTensor::Create(Spec(name), rows, d_in).value();
        auto pw = codec::EncodedTensor::Create(Spec(name), rows, d_in).value();
        ASSERT_TRUE(streamed->EncodeChunk(*xs, offset, ps.mutable_view(), key).ok());
        ASSERT_TRUE(whole->EncodeChunk(*xw, offset, pw.mutable_view(), key).ok());
        EXPECT_TRUE(ps.codes() == pw.codes() && ps.scales() == pw.scales())
            << name << " step " << step << " chunk " << c;
        if (k == 0) {  // rows [0, 256) written, the rest not yet
          EXPECT_FALSE(std::isnan(work_s[255 * d_in]));
          EXPECT_TRUE(std::isnan(work_s[256 * d_in])) << "rows past the first block written";
        }
      }
      EXPECT_TRUE(SameBits(work_s, work_w)) << name << " step " << step;
      streamed->CommitResidual();
      whole->CommitResidual();
      EXPECT_TRUE(std::equal(streamed->residual().begin(), streamed->residual().end(),
                             whole->residual().begin(), whole->residual().end(),
                             [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }))
          << name << " step " << step;
    }
  }
}

TEST(EncoderPipeline, EncodingAfterSwitchBasisWithoutPrepareIsRefused) {
  constexpr int64_t d_out = 64, d_in = 128;
  auto pipeline = EncoderPipeline::Create(testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 51),
                                          {.spec = Spec("nvfp4")});
  ASSERT_TRUE(pipeline.ok());
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 52);
  std::vector<float> work(g.size());
  auto x = pipeline->Prepare(g.data(), work.data());
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(pipeline->SwitchBasis(testing::TwoSidedBasis(d_out, d_in, 0.5, 8, 53, 2)).ok());
  auto payload = codec::EncodedTensor::Create(Spec("nvfp4"), d_out, d_in).value();
  EXPECT_EQ(pipeline->EncodeChunk(*x, 0, payload.mutable_view()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pipeline->PrepareRange(0, g.size() + 1).code(), absl::StatusCode::kInvalidArgument);
}

// Encodes the same gradient `steps` times and returns the relative error of
// the time average of the decoded outputs.
double TimeAverageError(EncoderPipeline& pipeline, const std::vector<float>& g, int steps) {
  std::vector<double> acc(g.size(), 0.0);
  std::vector<float> out(g.size());
  for (int s = 0; s < steps; ++s) {
    auto payload = pipeline.Encode(g.data(), {.tensor = 1, .step = static_cast<uint64_t>(s)});
    EXPECT_TRUE(payload.ok()) << payload.status();
    EXPECT_TRUE(pipeline.Decode(payload->view(), 1.0f, out.data()).ok());
    for (size_t i = 0; i < g.size(); ++i) acc[i] += out[i];
  }
  std::vector<float> avg(g.size());
  for (size_t i = 0; i < g.size(); ++i) avg[i] = static_cast<float>(acc[i] / steps);
  return RelativeL2(avg, g);
}

// With error feedback the decoded outputs telescope: sum_t out_t =
// K G - T^{-1}(E_K), so the time average's error falls like 1/K; without it
// (round to nearest, deterministic) every step repeats the same error.
TEST(EncoderPipeline, ErrorFeedbackMakesTheTimeAverageConverge) {
  constexpr int64_t d_out = 64, d_in = 128;
  constexpr int kSteps = 100;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 21);
  const std::vector<std::shared_ptr<const GradientTransform>> transforms = {
      Identity(d_out, d_in), testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 22)};
  for (const auto& t : transforms) {
    for (const std::string name : {"e4m3/tensor", "nvfp4"}) {
      auto plain = EncoderPipeline::Create(t, {.spec = Spec(name)});
      auto fed = EncoderPipeline::Create(t, {.spec = Spec(name), .error_feedback = true});
      ASSERT_TRUE(plain.ok() && fed.ok());
      const double without = TimeAverageError(*plain, g, kSteps);
      const double with = TimeAverageError(*fed, g, kSteps);
      std::cout << "[ ef       ] " << t->name() << " " << name << ", " << kSteps
                << " steps: time-average rel_l2 without EF " << without << ", with EF " << with
                << " (ratio " << with / without << ")\n";
      EXPECT_LT(with, 0.05 * without) << t->name() << " " << name;
    }
  }
}

TEST(EncoderPipeline, SwitchBasisRemapsTheResidualExactly) {
  constexpr int64_t d_out = 64, d_in = 128;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 31);
  const std::vector<std::shared_ptr<const GradientTransform>> chain = {
      testing::TwoSidedBasis(d_out, d_in, 0.25, 16, 32, /*version=*/1),
      testing::TwoSidedBasis(d_out, d_in, 0.125, 32, 33, /*version=*/2),
      std::make_shared<HadamardTransform>(HadamardTransform::Create(d_out, d_in).value()),
      Identity(d_out, d_in),
  };
  auto pipeline =
      EncoderPipeline::Create(chain[0], {.spec = Spec("nvfp4"), .error_feedback = true});
  ASSERT_TRUE(pipeline.ok());
  std::vector<double> acc(g.size(), 0.0);
  std::vector<float> out(g.size());
  int steps = 0;
  for (size_t k = 0; k < chain.size(); ++k) {
    if (k > 0) {
      // Inverse_old(E_old) before, Inverse_new(E_new) after.
      const std::vector<float> e_old(pipeline->residual().begin(), pipeline->residual().end());
      std::vector<float> before(g.size()), after(g.size());
      ASSERT_TRUE(chain[k - 1]->Inverse(e_old.data(), d_out, d_in, before.data()).ok());
      ASSERT_TRUE(pipeline->SwitchBasis(chain[k]).ok());
      EXPECT_EQ(&pipeline->transform(), chain[k].get());
      const std::vector<float> e_new(pipeline->residual().begin(), pipeline->residual().end());
      ASSERT_TRUE(chain[k]->Inverse(e_new.data(), d_out, d_in, after.data()).ok());
      const double remap_err = RelativeL2(after, before);
      std::cout << "[ remap    ] " << chain[k - 1]->name() << " -> " << chain[k]->name()
                << ": |Inv_new(E_new) - Inv_old(E_old)| / |Inv_old(E_old)| = " << remap_err
                << ", E changed by " << RelativeL2(e_new, e_old) << "\n";
      EXPECT_LE(remap_err, 1e-5);
    }
    for (int s = 0; s < 25; ++s, ++steps) {
      auto payload = pipeline->Encode(g.data());
      ASSERT_TRUE(payload.ok()) << payload.status();
      ASSERT_TRUE(pipeline->Decode(payload->view(), 1.0f, out.data()).ok());
      for (size_t i = 0; i < g.size(); ++i) acc[i] += out[i];
    }
  }
  // Across the switches the telescoping sum still holds (up to FP32
  // rounding of the remaps), so the time average converges as without them.
  std::vector<float> avg(g.size());
  for (size_t i = 0; i < g.size(); ++i) avg[i] = static_cast<float>(acc[i] / steps);
  const double across = RelativeL2(avg, g);
  auto plain = EncoderPipeline::Create(chain[0], {.spec = Spec("nvfp4")});
  const double without = TimeAverageError(*plain, g, 1);
  std::cout << "[ remap    ] time average over " << steps << " steps across 3 switches: rel_l2 "
            << across << " (one step without EF: " << without << ")\n";
  EXPECT_LT(across, 0.05 * without);
}

TEST(EncoderPipeline, FailuresLeaveThePipelineUnchanged) {
  constexpr int64_t d_out = 16, d_in = 32;
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, d_in, 41);
  auto pipeline = EncoderPipeline::Create(testing::TwoSidedBasis(d_out, d_in, 0.25, 4, 42),
                                          {.spec = Spec("e4m3/tensor"), .error_feedback = true});
  ASSERT_TRUE(pipeline.ok());
  ASSERT_TRUE(pipeline->Encode(g.data()).ok());
  const std::vector<float> e(pipeline->residual().begin(), pipeline->residual().end());
  double e_norm = 0.0;
  for (float v : e) e_norm += double(v) * v;
  EXPECT_GT(e_norm, 0.0);

  std::vector<float> bad = g;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(pipeline->Encode(bad.data()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pipeline->Encode(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pipeline->SwitchBasis(Identity(d_out, d_in + 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pipeline->SwitchBasis(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      SameBits(std::vector<float>(pipeline->residual().begin(), pipeline->residual().end()), e));

  std::vector<float> out(g.size());
  auto wrong = codec::EncodedTensor::Create(Spec("e4m3/tensor"), d_out, d_in + 1).value();
  EXPECT_EQ(pipeline->Decode(wrong.view(), 1.0f, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      pipeline->DecodeSum(g.data(), std::numeric_limits<float>::infinity(), out.data()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncoderPipeline::Create(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(EncoderPipeline::Create(Identity(d_out, d_in),
                                       {.spec = {.format = codec::Format::kBf16,
                                                 .scaling = codec::Scaling::kPerBlockFp32,
                                                 .block_size = 7}})
                   .ok());

  pipeline->ResetResidual();
  for (float v : pipeline->residual()) ASSERT_EQ(v, 0.0f);
}

// Eight workers, each with its own pipeline (sharing one transform), summed
// by the servers' ReduceEncoded.
constexpr int64_t kOut = 256, kIn = 512, kWorkers = 8;

std::vector<float> ExactAverage(const std::vector<std::vector<float>>& grads) {
  std::vector<float> exact(grads[0].size());
  for (size_t i = 0; i < exact.size(); ++i) {
    double sum = 0.0;
    for (const auto& g : grads) sum += g[i];
    exact[i] = static_cast<float>(sum / grads.size());
  }
  return exact;
}

// Encodes each worker's gradient with its pipeline, reduces the payloads to
// the FP32 average (post_scale 1/P) and decodes it with worker 0's pipeline.
std::vector<float> PipelineAverage(std::shared_ptr<const GradientTransform> t,
                                   const codec::CodecSpec& spec,
                                   const std::vector<std::vector<float>>& grads) {
  std::vector<codec::EncodedTensor> payloads;
  std::vector<codec::EncodedView> views;
  std::vector<EncoderPipeline> pipelines;
  for (int64_t w = 0; w < kWorkers; ++w) {
    pipelines.push_back(EncoderPipeline::Create(t, {.spec = spec}).value());
    auto p = pipelines.back().Encode(grads[w].data(),
                                     {.tensor = 1, .step = 1, .rank = static_cast<uint32_t>(w)});
    EXPECT_TRUE(p.ok()) << p.status();
    payloads.push_back(*std::move(p));
  }
  for (const auto& p : payloads) views.push_back(p.view());
  std::vector<float> avg(kOut * kIn);
  EXPECT_TRUE(
      codec::ReduceEncoded(views, avg.data(), 1.0f / kWorkers, codec::MutableEncodedView{}).ok());
  EXPECT_TRUE(pipelines[0].DecodeSum(avg.data(), 1.0f, avg.data()).ok());
  return avg;
}

TEST(EncoderPipeline, EightWorkerAverageThroughReduceEncoded) {
  const std::vector<std::vector<float>> grads =
      testing::SharedPlusNoiseGradients(kOut, kIn, kWorkers, 64, 0.1, /*step=*/3);
  const std::vector<float> exact = ExactAverage(grads);
  std::vector<const float*> pointers;
  for (const auto& g : grads) pointers.push_back(g.data());
  auto in = SecondMomentEma::Create(kIn);
  auto out = SecondMomentEma::Create(kOut);
  ASSERT_TRUE(in->UpdateInputSide(pointers, kOut, kIn).ok());
  ASSERT_TRUE(out->UpdateOutputSide(pointers, kOut, kIn).ok());
  auto basis = TensorBasis::Create(
      {.tensor_id = 1, .version = 1, .d_out = kOut, .d_in = kIn, .config = {Sides::kBoth, 0.25}},
      SideBasis::FromFactor(out->value(), 64).value(),
      SideBasis::FromFactor(in->value(), 64).value());
  ASSERT_TRUE(basis.ok()) << basis.status();
  const auto geometry = std::make_shared<TensorBasisTransform>(*std::move(basis));
  const auto identity = Identity(kOut, kIn);

  for (const std::string name : {"e4m3/block128", "e5m2/tensor"}) {
    const codec::CodecSpec spec = Spec(name);
    // Direct quantization of the average path: codec encode per worker,
    // ReduceEncoded with 1/P.
    std::vector<codec::EncodedTensor> direct;
    std::vector<codec::EncodedView> views;
    for (int64_t w = 0; w < kWorkers; ++w) {
      direct.push_back(codec::EncodedTensor::Create(spec, kOut, kIn).value());
      ASSERT_TRUE(codec::Encode(grads[w].data(), direct.back().mutable_view(),
                                {.tensor = 1, .step = 1, .rank = static_cast<uint32_t>(w)})
                      .ok());
    }
    for (const auto& d : direct) views.push_back(d.view());
    std::vector<float> direct_avg(kOut * kIn);
    ASSERT_TRUE(
        codec::ReduceEncoded(views, direct_avg.data(), 1.0f / kWorkers, codec::MutableEncodedView{})
            .ok());

    const std::vector<float> identity_avg = PipelineAverage(identity, spec, grads);
    EXPECT_TRUE(SameBits(identity_avg, direct_avg)) << name;

    // The re-encoded pull: servers sum (post_scale 1), re-encode; the
    // pipeline decodes with 1/P, as codec decode times 1/P does.
    auto pulled = codec::EncodedTensor::Create(spec, kOut, kIn).value();
    std::vector<float> sum(kOut * kIn);
    ASSERT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f, pulled.mutable_view()).ok());
    std::vector<float> via_pipeline(kOut * kIn), via_codec(kOut * kIn);
    auto p0 = EncoderPipeline::Create(identity, {.spec = spec}).value();
    ASSERT_TRUE(p0.Decode(pulled.view(), 1.0f / kWorkers, via_pipeline.data()).ok());
    ASSERT_TRUE(codec::Decode(pulled.view(), via_codec.data()).ok());
    for (float& v : via_codec) v *= 1.0f / kWorkers;
    EXPECT_TRUE(SameBits(via_pipeline, via_codec)) << name;

    const double direct_err = RelativeL2(direct_avg, exact);
    const double geometry_err = RelativeL2(PipelineAverage(geometry, spec, grads), exact);
    std::cout << "[ 8 workers] " << name << ": rel_l2_avg identity " << direct_err << ", "
              << geometry->name() << " " << geometry_err << " (ratio " << geometry_err / direct_err
              << ")\n";
    EXPECT_LE(geometry_err, 0.5 * direct_err) << name;
  }
}

}  // namespace
}  // namespace gift::transform
