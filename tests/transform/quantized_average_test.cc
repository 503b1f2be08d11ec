// The claim of docs/design.md sections 3.1-3.2 on synthetic anisotropic gradients: the two-sided
// quarter-power transform built from the per-worker second moments lowers
// the error of the FP8 average at least 2x against direct quantization.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

constexpr int64_t kAveragedOut = 256, kAveragedIn = 512, kAveragedWorkers = 8;
constexpr int64_t kDirections = 64;
constexpr double kNoise = 0.1;  // each worker's noise, relative to ||shared||_F

// G_i = S + N_i: S = sum_k s_k u_k v_k^T over 64 random orthonormal
// directions with s_k = k^-1.5, N_i iid Gaussian with
// ||N_i||_F ~= 0.1 ||S||_F, drawn afresh at every step (S stays fixed).
std::vector<std::vector<float>> WorkerGradients(uint32_t step) {
  return testing::SharedPlusNoiseGradients(kAveragedOut, kAveragedIn, kAveragedWorkers, kDirections,
                                           kNoise, step);
}

// Encodes each contribution with `spec`, averages them as the servers do
// (ReduceEncoded with post_scale = 1/P) and returns the FP32 average.
std::vector<float> QuantizedAverage(const std::vector<std::vector<float>>& contributions,
                                    const codec::CodecSpec& spec) {
  std::vector<codec::EncodedTensor> encoded;
  std::vector<codec::EncodedView> views;
  for (size_t w = 0; w < contributions.size(); ++w) {
    encoded.push_back(codec::EncodedTensor::Create(spec, kAveragedOut, kAveragedIn).value());
    EXPECT_TRUE(codec::Encode(contributions[w].data(), encoded.back().mutable_view(),
                              {.tensor = 1, .step = 1, .rank = static_cast<uint32_t>(w)})
                    .ok());
  }
  for (const auto& t : encoded) views.push_back(t.view());
  std::vector<float> avg(kAveragedOut * kAveragedIn);
  EXPECT_TRUE(
      codec::ReduceEncoded(views, avg.data(), 1.0f / kAveragedWorkers, codec::MutableEncodedView{})
          .ok());
  return avg;
}

TEST(QuantizedAverage, TwoSidedQuarterPowerHalvesTheErrorOfTheFp8Average) {
  constexpr uint32_t kStep = 3;
  const std::vector<std::vector<float>> grads = WorkerGradients(kStep);
  std::vector<float> exact(kAveragedOut * kAveragedIn);
  for (int64_t i = 0; i < kAveragedOut * kAveragedIn; ++i) {
    double sum = 0.0;
    for (const auto& g : grads) sum += g[i];
    exact[i] = static_cast<float>(sum / kAveragedWorkers);
  }

  // Per-worker second moments: of this step alone (fresh, not causal, as in
  // the held-out measurement of docs/design.md section 3.2), and the EMA of the steps before
  // it (causal).
  auto fresh_in = SecondMomentEma::Create(kAveragedIn);
  auto fresh_out = SecondMomentEma::Create(kAveragedOut);
  auto causal_in = SecondMomentEma::Create(kAveragedIn);
  auto causal_out = SecondMomentEma::Create(kAveragedOut);
  for (uint32_t step = 0; step <= kStep; ++step) {
    const std::vector<std::vector<float>> step_grads =
        step == kStep ? grads : WorkerGradients(step);
    std::vector<const float*> pointers;
    for (const auto& g : step_grads) pointers.push_back(g.data());
    SecondMomentEma& in = step == kStep ? *fresh_in : *causal_in;
    SecondMomentEma& out = step == kStep ? *fresh_out : *causal_out;
    ASSERT_TRUE(in.UpdateInputSide(pointers, kAveragedOut, kAveragedIn).ok());
    ASSERT_TRUE(out.UpdateOutputSide(pointers, kAveragedOut, kAveragedIn).ok());
  }

  struct Config {
    std::string name;
    double power;
    int64_t rank;
    ResidualModel residual;
    const SecondMomentEma* in;
    const SecondMomentEma* out;
    bool asserted;  // the claim is checked on these; the others are reported
  };
  const SecondMomentEma* fi = &*fresh_in;
  const SecondMomentEma* fo = &*fresh_out;
  const ResidualModel iso = ResidualModel::kIsotropic;
  const std::vector<Config> configs = {
      {"fresh full rank", 0.25, kAveragedIn, iso, fi, fo, true},
      {"fresh r=64 isotropic", 0.25, 64, iso, fi, fo, true},
      {"fresh r=32 isotropic", 0.25, 32, iso, fi, fo, false},
      {"fresh r=64 diagonal", 0.25, 64, ResidualModel::kDiagonal, fi, fo, false},
      {"causal EMA r=64 isotropic", 0.25, 64, iso, &*causal_in, &*causal_out, true},
      // Whitening, the control: docs/design.md section 3.1 predicts no gain from it.
      {"fresh full rank (whitening)", 0.5, kAveragedIn, iso, fi, fo, false},
  };
  for (const std::string spec_name : {"e4m3/block128", "e5m2/tensor"}) {
    const codec::CodecSpec spec = codec::ParseCodecSpec(spec_name).value();
    const double direct_err = RelativeL2(QuantizedAverage(grads, spec), exact);
    std::vector<double> ratios;
    for (const Config& c : configs) {
      const SideBasisOptions options{.residual = c.residual};
      auto basis = TensorBasis::Create(
          {.tensor_id = 1,
           .version = 1,
           .d_out = kAveragedOut,
           .d_in = kAveragedIn,
           .config = {Sides::kBoth, c.power}},
          SideBasis::FromFactor(c.out->value(), std::min(c.rank, kAveragedOut), options).value(),
          SideBasis::FromFactor(c.in->value(), std::min(c.rank, kAveragedIn), options).value());
      ASSERT_TRUE(basis.ok()) << basis.status();
      std::vector<std::vector<float>> transformed;
      for (const auto& g : grads) {
        std::vector<float> t(g.size());
        ASSERT_TRUE(basis->Forward(g.data(), kAveragedOut, kAveragedIn, t.data()).ok());
        transformed.push_back(std::move(t));
      }
      std::vector<float> avg = QuantizedAverage(transformed, spec);
      ASSERT_TRUE(basis->Inverse(avg.data(), kAveragedOut, kAveragedIn, avg.data()).ok());
      const double err = RelativeL2(avg, exact);
      const double ratio = err / direct_err;
      ratios.push_back(ratio);
      std::cout << "[ fp8 avg  ] " << spec_name << " two-sided p=" << c.power << " " << c.name
                << ": rel_l2_avg=" << err << " direct=" << direct_err << " ratio=" << ratio << "\n";
      ::testing::Test::RecordProperty(spec_name + " " + c.name + " ratio", std::to_string(ratio));
      if (c.asserted) {
        EXPECT_LE(ratio, 0.5) << spec_name << " " << c.name;
      }
    }
    // The quarter power beats whitening from the same statistics.
    EXPECT_LT(ratios.front(), ratios.back()) << spec_name;
  }
}

}  // namespace
}  // namespace gift::transform
