// Shared helpers of the transform tests: random orthonormal bases, factors
// with a known spectrum, and gradients.
#ifndef GIFT_TESTS_TRANSFORM_TEST_UTIL_H_
#define GIFT_TESTS_TRANSFORM_TEST_UTIL_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/base/relative_error.h"
#include "common/transform/identity_transform.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_transform.h"
#include "gtest/gtest.h"

namespace gift::transform::testing {

// Whether `a` and `b` hold the same floats bit for bit.
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// The identity transform of a d_out x d_in gradient.
inline std::shared_ptr<const GradientTransform> Identity(int64_t d_out, int64_t d_in) {
  return std::make_shared<IdentityTransform>(IdentityTransform::Create(d_out, d_in).value());
}

inline Eigen::MatrixXd Gaussian(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Eigen::MatrixXd m(rows, cols);
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) m(i, j) = normal(rng);
  }
  return m;
}

// n x k with orthonormal columns, k <= n.
inline Eigen::MatrixXd RandomOrthonormal(int64_t n, int64_t k, uint32_t seed) {
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(Gaussian(n, k, seed));
  return qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
}

// Q diag(spectrum) Q^T for a random orthogonal Q.
inline Eigen::MatrixXd FactorWithSpectrum(const Eigen::VectorXd& spectrum, uint32_t seed) {
  const int64_t n = spectrum.size();
  const Eigen::MatrixXd q = RandomOrthonormal(n, n, seed);
  Eigen::MatrixXd a = q * spectrum.asDiagonal() * q.transpose();
  return 0.5 * (a + a.transpose());
}

// A rows x cols row-major FP32 matrix with correlated rows and columns
// (anisotropic, like a gradient) of unit-ish scale.
inline std::vector<float> AnisotropicMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  const Eigen::MatrixXd left = Gaussian(rows, rows, seed);
  const Eigen::MatrixXd right = Gaussian(cols, cols, seed + 1);
  Eigen::VectorXd left_scale(rows), right_scale(cols);
  for (int64_t i = 0; i < rows; ++i) left_scale(i) = std::pow(1.0 + i, -0.5);
  for (int64_t j = 0; j < cols; ++j) right_scale(j) = std::pow(1.0 + j, -0.5);
  const Eigen::MatrixXd m = (left * left_scale.asDiagonal()) * Gaussian(rows, cols, seed + 2) *
                            (right_scale.asDiagonal() * right.transpose());
  std::vector<float> out(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(m(i, j));
  }
  return out;
}

// Per-worker gradients G_i = S + N_i of a data-parallel step (the generator
// of quantized_average_test.cc): S = sum_k s_k u_k v_k^T over `directions`
// random orthonormal directions (fixed seeds, so S is the same at every
// step) with s_k = (k + 1)^-1.5, and N_i iid Gaussian with
// ||N_i||_F ~= noise ||S||_F, drawn afresh for each (step, worker).
inline std::vector<std::vector<float>> SharedPlusNoiseGradients(int64_t rows, int64_t cols,
                                                                int64_t workers, int64_t directions,
                                                                double noise, uint32_t step) {
  const Eigen::MatrixXd u = RandomOrthonormal(rows, directions, 1);
  const Eigen::MatrixXd v = RandomOrthonormal(cols, directions, 2);
  Eigen::VectorXd s(directions);
  for (int64_t k = 0; k < directions; ++k) s(k) = std::pow(1.0 + k, -1.5);
  const Eigen::MatrixXd shared = u * s.asDiagonal() * v.transpose();
  const double noise_scale = noise * shared.norm() / std::sqrt(double(rows * cols));
  std::vector<std::vector<float>> grads;
  for (int64_t w = 0; w < workers; ++w) {
    const Eigen::MatrixXd g =
        shared +
        noise_scale * Gaussian(rows, cols, static_cast<uint32_t>(100 + workers * step + w));
    std::vector<float> x(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = static_cast<float>(g(i, j));
    }
    grads.push_back(std::move(x));
  }
  return grads;
}

// Row-major FP32 buffer to an Eigen double matrix.
inline Eigen::MatrixXd ToMatrix(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m(i, j) = x[i * cols + j];
  }
  return m;
}

// The input- and output-side second moments of `samples` anisotropic
// gradient samples of this shape (seeds seed, seed + 10, ...), as the EMA
// would hold them.
struct Factors {
  Eigen::MatrixXd in, out;
};
inline Factors SampleFactors(int64_t d_out, int64_t d_in, uint32_t seed, uint32_t samples) {
  auto in = SecondMomentEma::Create(d_in);
  auto out = SecondMomentEma::Create(d_out);
  EXPECT_TRUE(in.ok() && out.ok());
  for (uint32_t k = 0; k < samples; ++k) {
    const std::vector<float> g = AnisotropicMatrix(d_out, d_in, seed + 10 * k);
    EXPECT_TRUE(in->UpdateInputSide({g.data()}, d_out, d_in).ok());
    EXPECT_TRUE(out->UpdateOutputSide({g.data()}, d_out, d_in).ok());
  }
  return {in->value(), out->value()};
}

inline std::string Name(ResidualModel m) { return m == ResidualModel::kIsotropic ? "iso" : "diag"; }
inline std::string Name(Sides s) {
  return s == Sides::kInput ? "in" : (s == Sides::kOutput ? "out" : "both");
}

// A TensorBasis of these factors (each side's rank capped at its dimension).
inline TensorBasis MakeBasis(const Factors& f, int64_t rank, ResidualModel residual, Sides sides,
                             double p) {
  const int64_t d_out = f.out.rows(), d_in = f.in.rows();
  std::optional<SideBasis> out_side, in_side;
  const SideBasisOptions options{.residual = residual};
  if (sides != Sides::kInput) {
    out_side.emplace(SideBasis::FromFactor(f.out, std::min(rank, d_out), options).value());
  }
  if (sides != Sides::kOutput) {
    in_side.emplace(SideBasis::FromFactor(f.in, std::min(rank, d_in), options).value());
  }
  return TensorBasis::Create({.tensor_id = 1,
                              .version = 1,
                              .d_out = d_out,
                              .d_in = d_in,
                              .config = {.sides = sides, .power = p}},
                             std::move(out_side), std::move(in_side))
      .value();
}

// A two-sided isotropic TensorBasisTransform of power p from the second
// moments of three anisotropic samples (SampleFactors(d_out, d_in, seed, 3)),
// each side's rank capped at its dimension.
inline std::shared_ptr<const TensorBasisTransform> TwoSidedBasis(int64_t d_out, int64_t d_in,
                                                                 double p, int64_t rank,
                                                                 uint32_t seed,
                                                                 uint64_t version = 1) {
  const Factors f = SampleFactors(d_out, d_in, seed, 3);
  auto basis = TensorBasis::Create({.tensor_id = 1,
                                    .version = version,
                                    .d_out = d_out,
                                    .d_in = d_in,
                                    .config = {Sides::kBoth, p}},
                                   SideBasis::FromFactor(f.out, std::min(rank, d_out)).value(),
                                   SideBasis::FromFactor(f.in, std::min(rank, d_in)).value());
  EXPECT_TRUE(basis.ok()) << basis.status();
  return std::make_shared<TensorBasisTransform>(*std::move(basis));
}

}  // namespace gift::transform::testing

#endif  // GIFT_TESTS_TRANSFORM_TEST_UTIL_H_
