// The two-sided power transform: exact inverse, agreement with dense
// references, the whitening property at p = 1/2, and argument errors.
#include "common/transform/tensor_basis.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using RowMajorMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Forward then inverse must return G within this relative L2 error.
constexpr double kRoundTripTolerance = 1e-5;

using testing::MakeBasis;
using testing::Name;

// The side's power-p operator W_p as a dense matrix, computed independently
// of the basis's Z / Sig factorization: from F = U Lam U^T + residual,
//   isotropic: W_p = F^{-p} by a dense eigendecomposition of F;
//   diagonal:  W_p = (D^{-1/2} F D^{-1/2})^{-p} D^{-p}.
Eigen::MatrixXd DenseOperator(const SideBasis& side, double p) {
  const SideBasis::Parts& parts = side.parts();
  const int64_t n = side.dim();
  if (parts.residual == ResidualModel::kIsotropic) {
    const double delta = parts.damping;
    const double sigma_damped = parts.d(0);
    const Eigen::MatrixXd f =
        parts.u * (parts.lam.array() + delta).matrix().asDiagonal() * parts.u.transpose() +
        sigma_damped * (Eigen::MatrixXd::Identity(n, n) - parts.u * parts.u.transpose());
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(f);
    return eig.eigenvectors() * eig.eigenvalues().array().pow(-p).matrix().asDiagonal() *
           eig.eigenvectors().transpose();
  }
  const Eigen::MatrixXd f = parts.u * parts.lam.asDiagonal() * parts.u.transpose() +
                            Eigen::MatrixXd(parts.d.asDiagonal());
  const Eigen::VectorXd d_inv_sqrt = parts.d.array().rsqrt();
  const Eigen::MatrixXd inner = d_inv_sqrt.asDiagonal() * f * d_inv_sqrt.asDiagonal();
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(0.5 * (inner + inner.transpose()));
  return eig.eigenvectors() * eig.eigenvalues().array().pow(-p).matrix().asDiagonal() *
         eig.eigenvectors().transpose() * parts.d.array().pow(-p).matrix().asDiagonal();
}

TEST(TensorBasis, ForwardMatchesDenseReferenceAndInverseIsExact) {
  struct Shape {
    int64_t d_out, d_in;
  };
  double worst_round_trip = 0.0, worst_reference = 0.0;
  for (const Shape shape : {Shape{64, 96}, Shape{130, 70}, Shape{33, 33}}) {
    const testing::Factors f = testing::SampleFactors(shape.d_out, shape.d_in, 7, 4);
    const std::vector<float> g = testing::AnisotropicMatrix(shape.d_out, shape.d_in, 1000);
    const Eigen::MatrixXd gm = testing::ToMatrix(g, shape.d_out, shape.d_in);
    for (int64_t rank : {int64_t{1}, int64_t{8}, std::max(shape.d_out, shape.d_in)}) {
      for (ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
        for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
          for (double p : {0.125, 0.25, 0.5}) {
            const std::string what = "shape " + std::to_string(shape.d_out) + "x" +
                                     std::to_string(shape.d_in) + " r=" + std::to_string(rank) +
                                     " " + Name(residual) + " " + Name(sides) +
                                     " p=" + std::to_string(p);
            const TensorBasis basis = MakeBasis(f, rank, residual, sides, p);
            std::vector<float> t(g.size()), back(g.size());
            ASSERT_TRUE(basis.Forward(g.data(), shape.d_out, shape.d_in, t.data()).ok()) << what;
            ASSERT_TRUE(basis.Inverse(t.data(), shape.d_out, shape.d_in, back.data()).ok()) << what;
            const double round_trip = RelativeL2(back, g);
            worst_round_trip = std::max(worst_round_trip, round_trip);
            EXPECT_LE(round_trip, kRoundTripTolerance) << what;

            // The forward is the operator W_out G W_in^T of the dense
            // reference, and it is not the identity.
            Eigen::MatrixXd want = gm;
            if (basis.input_side()) want = want * DenseOperator(*basis.input_side(), p).transpose();
            if (basis.output_side()) want = DenseOperator(*basis.output_side(), p) * want;
            std::vector<float> want_f(g.size());
            for (int64_t i = 0; i < shape.d_out; ++i) {
              for (int64_t j = 0; j < shape.d_in; ++j) {
                want_f[i * shape.d_in + j] = static_cast<float>(want(i, j));
              }
            }
            const double reference = RelativeL2(t, want_f);
            worst_reference = std::max(worst_reference, reference);
            EXPECT_LE(reference, 1e-5) << what;
            EXPECT_GE(RelativeL2(t, g), 1e-3) << what;

            // In place gives the same bits.
            std::vector<float> in_place = g;
            ASSERT_TRUE(
                basis.Forward(in_place.data(), shape.d_out, shape.d_in, in_place.data()).ok());
            EXPECT_EQ(std::memcmp(in_place.data(), t.data(), t.size() * sizeof(float)), 0) << what;
          }
        }
      }
    }
  }
  std::cout << "[ roundtrip] worst relative L2 of inverse(forward(G)) - G: " << worst_round_trip
            << "; worst forward vs dense reference: " << worst_reference << "\n";
}

// W^T from the input side's forward on identity rows.
Eigen::MatrixXd OperatorTransposeFromForward(const SideBasis& side, double p) {
  const int64_t n = side.dim();
  RowMajorMatrixXf identity = RowMajorMatrixXf::Identity(n, n);
  RowMajorMatrixXf w_t(n, n);
  EXPECT_TRUE(side.ForwardRight(identity.data(), n, p, w_t.data()).ok());
  return w_t.cast<double>();
}

Eigen::MatrixXd OperatorFromLeftForward(const SideBasis& side, double p) {
  const int64_t n = side.dim();
  RowMajorMatrixXf identity = RowMajorMatrixXf::Identity(n, n);
  RowMajorMatrixXf w(n, n);
  EXPECT_TRUE(side.ForwardLeft(identity.data(), n, p, w.data()).ok());
  return w.cast<double>();
}

// Whitening tolerance: W is rounded to FP32 (measured ~1e-7 on the factors
// below, whose condition numbers are below 100).
constexpr double kWhiteningTolerance = 1e-6;

TEST(SideBasis, IsotropicModelIsExactOnAnIsotropicTailAndWhitensAtHalfPower) {
  const int64_t n = 48, r = 6;
  Eigen::VectorXd spectrum = Eigen::VectorXd::Ones(n);
  spectrum.head(r) << 50.0, 30.0, 20.0, 10.0, 5.0, 3.0;
  const Eigen::MatrixXd a = testing::FactorWithSpectrum(spectrum, 21);
  // The flat tail leaves a gap of only 3 after r, so the subspace iteration
  // is run long enough to be exact to rounding ((1/3)^41).
  auto side = SideBasis::FromFactor(a, r, {.residual = ResidualModel::kIsotropic},
                                    {.power_iterations = 20});
  ASSERT_TRUE(side.ok()) << side.status();
  const double delta = 1e-3 * a.trace() / n;
  EXPECT_DOUBLE_EQ(side->parts().damping, delta);
  EXPECT_NEAR(side->parts().d(0), 1.0 + delta, 1e-10);
  for (int64_t j = 0; j < r; ++j) EXPECT_NEAR(side->parts().lam(j), spectrum(j), 1e-9);
  // The model is A + delta I exactly.
  const Eigen::MatrixXd f = side->DenseModelFactor();
  const Eigen::MatrixXd damped = a + delta * Eigen::MatrixXd::Identity(n, n);
  EXPECT_LE((f - damped).cwiseAbs().maxCoeff(), 1e-10);

  const Eigen::MatrixXd w_t = OperatorTransposeFromForward(*side, 0.5);
  const Eigen::MatrixXd white = w_t.transpose() * damped * w_t;
  const double whitening_err = (white - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
  std::cout << "[ whiten   ] isotropic max |W F W^T - I| = " << whitening_err << "\n";
  EXPECT_LE(whitening_err, kWhiteningTolerance);
  // Left and right forms are the same operator.
  EXPECT_LE((OperatorFromLeftForward(*side, 0.5) - w_t.transpose()).cwiseAbs().maxCoeff(), 1e-6);
  // Any real p: W_{1/4} W_{1/4} = W_{1/2} (F^{-1/4} F^{-1/4} = F^{-1/2}).
  const Eigen::MatrixXd w_quarter = OperatorTransposeFromForward(*side, 0.25);
  EXPECT_LE((w_quarter * w_quarter - w_t).cwiseAbs().maxCoeff(), 1e-6);
}

TEST(SideBasis, DiagonalModelWhitensItsModelAtHalfPower) {
  const int64_t n = 40, r = 5;
  const Eigen::MatrixXd u0 = testing::RandomOrthonormal(n, r, 31);
  Eigen::VectorXd lam0(r);
  lam0 << 40.0, 20.0, 12.0, 6.0, 3.0;
  Eigen::VectorXd d0(n);
  for (int64_t i = 0; i < n; ++i) d0(i) = 0.5 + 1.5 * i / (n - 1.0);
  Eigen::MatrixXd a = u0 * lam0.asDiagonal() * u0.transpose();
  a.diagonal() += d0;
  auto side = SideBasis::FromFactor(a, r, {.residual = ResidualModel::kDiagonal});
  ASSERT_TRUE(side.ok()) << side.status();
  const SideBasis::Parts& parts = side->parts();
  const double delta = 1e-3 * a.trace() / n;

  // F = U Lam U^T + D with D = diag(A - U Lam U^T) + delta: its diagonal is
  // A's plus delta, and the Z / Sig factorization reproduces it.
  Eigen::MatrixXd f = parts.u * parts.lam.asDiagonal() * parts.u.transpose();
  f.diagonal() += parts.d;
  EXPECT_LE(((f.diagonal() - a.diagonal()).array() - delta).abs().maxCoeff(), 1e-10);
  EXPECT_LE((side->DenseModelFactor() - f).cwiseAbs().maxCoeff(), 1e-10);

  const Eigen::MatrixXd w_t = OperatorTransposeFromForward(*side, 0.5);
  const Eigen::MatrixXd white = w_t.transpose() * f * w_t;
  const double whitening_err = (white - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
  std::cout << "[ whiten   ] diagonal max |W F W^T - I| = " << whitening_err << "\n";
  EXPECT_LE(whitening_err, kWhiteningTolerance);
  EXPECT_LE((OperatorFromLeftForward(*side, 0.5) - w_t.transpose()).cwiseAbs().maxCoeff(), 1e-6);
}

TEST(TensorBasis, RejectsBadArguments) {
  const testing::Factors f = testing::SampleFactors(16, 24, 3, 4);
  auto in_side = SideBasis::FromFactor(f.in, 4);
  auto out_side = SideBasis::FromFactor(f.out, 4);
  ASSERT_TRUE(in_side.ok() && out_side.ok());
  TensorBasisHeader h{.d_out = 16, .d_in = 24, .config = {.sides = Sides::kBoth, .power = 0.25}};
  for (double p : {0.0, -0.25, std::numeric_limits<double>::infinity(), std::nan("")}) {
    TensorBasisHeader bad = h;
    bad.config.power = p;
    EXPECT_EQ(TensorBasis::Create(bad, *out_side, *in_side).status().code(),
              absl::StatusCode::kInvalidArgument)
        << p;
  }
  EXPECT_FALSE(TensorBasis::Create(h, std::nullopt, *in_side).ok());  // missing side
  EXPECT_FALSE(TensorBasis::Create(h, *in_side, *out_side).ok());     // swapped dimensions
  TensorBasisHeader input_only = h;
  input_only.config.sides = Sides::kInput;
  EXPECT_FALSE(TensorBasis::Create(input_only, *out_side, *in_side).ok());  // extra side

  auto basis = TensorBasis::Create(h, *out_side, *in_side);
  ASSERT_TRUE(basis.ok());
  std::vector<float> g = testing::AnisotropicMatrix(16, 24, 4), out(g.size(), 7.0f);
  EXPECT_EQ(basis->Forward(g.data(), 24, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  g[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(basis->Forward(g.data(), 16, 24, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(basis->Inverse(g.data(), 16, 24, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, std::vector<float>(g.size(), 7.0f));  // untouched
  EXPECT_EQ(in_side->ForwardRight(g.data(), 16, 0.0, out.data()).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_FALSE(SideBasis::FromFactor(f.in, 0).ok());
  EXPECT_FALSE(SideBasis::FromFactor(f.in, 25).ok());
  EXPECT_FALSE(SideBasis::FromFactor(f.in, 4, {.damping_eps = 0.0}).ok());
  EXPECT_EQ(SideBasis::FromFactor(Eigen::MatrixXd::Zero(8, 8), 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gift::transform
