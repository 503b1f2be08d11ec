// The reference transforms behind the GradientTransform interface: exact
// inverses, the dense form's whitening and its relation to TensorBasis, the
// Hadamard rotation's norm preservation and block handling, and argument
// errors.
#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <vector>

#include "common/transform/dense_whitening_transform.h"
#include "common/transform/gradient_transform.h"
#include "common/transform/hadamard_transform.h"
#include "common/transform/identity_transform.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_transform.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

constexpr double kRoundTripTolerance = 1e-5;  // relative L2, FP32

// A factor with a decaying spectrum (known eigenvalues) of dimension n.
Eigen::MatrixXd DecayingFactor(int64_t n, uint32_t seed) {
  Eigen::VectorXd spectrum(n);
  for (int64_t i = 0; i < n; ++i) spectrum(i) = std::pow(1.0 + i, -1.5) + 1e-4;
  return testing::FactorWithSpectrum(spectrum, seed);
}

template <typename T>
std::shared_ptr<const GradientTransform> Shared(absl::StatusOr<T> t) {
  EXPECT_TRUE(t.ok()) << t.status();
  return std::make_shared<T>(*std::move(t));
}

TEST(ReferenceTransforms, ForwardThenInverseReturnsTheGradient) {
  struct Case {
    int64_t d_out, d_in;
    std::shared_ptr<const GradientTransform> t;
  };
  const std::vector<Case> cases = {
      {48, 128, Shared(IdentityTransform::Create(48, 128))},
      {48, 128, Shared(DenseWhiteningTransform::Create(DecayingFactor(128, 5), 16, 48))},
      {48, 128, Shared(DenseWhiteningTransform::Create(DecayingFactor(128, 6), 128, 48))},
      {48, 256, Shared(HadamardTransform::Create(48, 256))},
      {48, 192, Shared(HadamardTransform::Create(48, 192, {.block = 64}))},
      {48, 128, testing::TwoSidedBasis(48, 128, 0.25, 16, 7)},
  };
  for (const Case& c : cases) {
    const std::vector<float> g = testing::AnisotropicMatrix(c.d_out, c.d_in, 11);
    std::vector<float> x(g.size()), back(g.size());
    ASSERT_TRUE(c.t->Forward(g.data(), c.d_out, c.d_in, x.data()).ok()) << c.t->name();
    ASSERT_TRUE(c.t->Inverse(x.data(), c.d_out, c.d_in, back.data()).ok()) << c.t->name();
    const double err = RelativeL2(back, g);
    std::cout << "[ roundtrip] " << c.t->name() << ": rel_l2=" << err
              << " |T(G)-G|/|G|=" << RelativeL2(x, g) << "\n";
    EXPECT_LE(err, kRoundTripTolerance) << c.t->name();
    // In place gives the same bits as out of place.
    std::vector<float> in_place = g;
    ASSERT_TRUE(c.t->Forward(in_place.data(), c.d_out, c.d_in, in_place.data()).ok());
    EXPECT_EQ(0, std::memcmp(in_place.data(), x.data(), sizeof(float) * x.size())) << c.t->name();
  }
}

TEST(DenseWhitening, WhitensItsModelWithAKnownSpectrum) {
  constexpr int64_t n = 96;
  const Eigen::MatrixXd a = DecayingFactor(n, 21);
  for (int64_t rank : {int64_t{8}, int64_t{32}, n}) {
    auto t = DenseWhiteningTransform::Create(a, rank, /*d_out=*/4);
    ASSERT_TRUE(t.ok()) << t.status();
    const Eigen::MatrixXd& l = t->cholesky_l();
    // L^{-1} A_hat L^{-T}.
    Eigen::MatrixXd white = l.triangularView<Eigen::Lower>().solve(t->a_hat());
    white = l.triangularView<Eigen::Lower>().solve(white.transpose()).eval();
    const double err = (white - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
    std::cout << "[ whiten   ] dense r=" << rank << " max |L^-1 A_hat L^-T - I| = " << err << "\n";
    EXPECT_LE(err, 1e-9);
    // At full rank the residual is zero (below the floor), so A_hat is A plus
    // floor and damping on the diagonal: 2e-3 * trace / n.
    if (rank == n) {
      const double shift = 2e-3 * a.trace() / n;
      EXPECT_LE((t->a_hat() - a - shift * Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff(),
                1e-12);
    }
  }
}

// With floor_eps = 0 the published A_hat is SideBasis's diagonal model F, and
// both transforms whiten it, so the p = 1/2 input-side TensorBasis operator W
// equals Q L^{-1} for an orthogonal Q. They agree up to that rotation:
//   X_basis X_basis^T = X_dense X_dense^T = G A_hat^{-1} G^T,
// and M = Forward_basis(Inverse_dense(I)) = (W L)^T is orthogonal. Q is not
// the identity (L is triangular, W is not), so the elementwise outputs differ.
TEST(DenseWhitening, AgreesWithTensorBasisAtHalfPowerUpToARotation) {
  constexpr int64_t n = 128, d_out = 64, rank = 16;
  const Eigen::MatrixXd a = testing::SampleFactors(d_out, n, 31, 3).in;
  auto dense = DenseWhiteningTransform::Create(a, rank, d_out, {.floor_eps = 0.0});
  ASSERT_TRUE(dense.ok()) << dense.status();
  auto side = SideBasis::FromFactor(a, rank, {.residual = ResidualModel::kDiagonal});
  ASSERT_TRUE(side.ok()) << side.status();
  const double model_err = (dense->a_hat() - side->DenseModelFactor()).cwiseAbs().maxCoeff() /
                           dense->a_hat().cwiseAbs().maxCoeff();
  std::cout << "[ dense~tb ] max |A_hat - F_diag| / max |A_hat| = " << model_err << "\n";
  EXPECT_LE(model_err, 1e-10);

  auto basis = TensorBasis::Create(
      {.tensor_id = 1, .version = 1, .d_out = d_out, .d_in = n, .config = {Sides::kInput, 0.5}},
      std::nullopt, *std::move(side));
  ASSERT_TRUE(basis.ok()) << basis.status();
  const TensorBasisTransform tb(*std::move(basis));

  const std::vector<float> g = testing::AnisotropicMatrix(d_out, n, 41);
  std::vector<float> x_dense(g.size()), x_tb(g.size());
  ASSERT_TRUE(dense->Forward(g.data(), d_out, n, x_dense.data()).ok());
  ASSERT_TRUE(tb.Forward(g.data(), d_out, n, x_tb.data()).ok());
  const Eigen::MatrixXd gram_dense =
      testing::ToMatrix(x_dense, d_out, n) * testing::ToMatrix(x_dense, d_out, n).transpose();
  const Eigen::MatrixXd gram_tb =
      testing::ToMatrix(x_tb, d_out, n) * testing::ToMatrix(x_tb, d_out, n).transpose();
  const double gram_err = (gram_dense - gram_tb).norm() / gram_dense.norm();
  const double elementwise = RelativeL2(x_tb, x_dense);
  std::cout << "[ dense~tb ] |XX^T_dense - XX^T_tb| / |XX^T_dense| = " << gram_err
            << ", elementwise |X_tb - X_dense| / |X_dense| = " << elementwise << "\n";
  EXPECT_LE(gram_err, 1e-5);
  EXPECT_GT(elementwise, 1e-2);  // a real rotation, not the same map

  // M = Forward_tb(Inverse_dense(I_n)) is orthogonal.
  auto dense_square = DenseWhiteningTransform::Create(a, rank, n, {.floor_eps = 0.0});
  ASSERT_TRUE(dense_square.ok());
  auto basis_square = TensorBasis::Create(
      {.tensor_id = 1, .version = 1, .d_out = n, .d_in = n, .config = {Sides::kInput, 0.5}},
      std::nullopt, SideBasis::FromFactor(a, rank, {.residual = ResidualModel::kDiagonal}).value());
  ASSERT_TRUE(basis_square.ok());
  const TensorBasisTransform tb_square(*std::move(basis_square));
  std::vector<float> m(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) m[i * n + i] = 1.0f;
  ASSERT_TRUE(dense_square->Inverse(m.data(), n, n, m.data()).ok());
  ASSERT_TRUE(tb_square.Forward(m.data(), n, n, m.data()).ok());
  const Eigen::MatrixXd q = testing::ToMatrix(m, n, n);
  const double orth_err =
      (q * q.transpose() - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
  std::cout << "[ dense~tb ] max |M M^T - I| = " << orth_err << "\n";
  EXPECT_LE(orth_err, 1e-5);
}

TEST(DenseWhitening, RefusesBadArguments) {
  const Eigen::MatrixXd a = DecayingFactor(16, 3);
  EXPECT_EQ(DenseWhiteningTransform::Create(a, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DenseWhiteningTransform::Create(a, 4, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DenseWhiteningTransform::Create(a, 4, 4, {.floor_eps = 0.0, .damping_eps = 0.0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DenseWhiteningTransform::Create(Eigen::MatrixXd::Zero(16, 16), 4, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DenseWhiteningTransform::Create(a.topRows(8), 4, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Hadamard, IsTheDenseRandomizedHadamardAndPreservesTheNorm) {
  constexpr int64_t d_out = 6, n = 16;
  auto t = HadamardTransform::Create(d_out, n, {.seed = 99});
  ASSERT_TRUE(t.ok()) << t.status();
  // Sylvester H_n, and the dense reference G H D / sqrt(n).
  Eigen::MatrixXd h(1, 1);
  h(0, 0) = 1.0;
  while (h.rows() < n) {
    Eigen::MatrixXd next(2 * h.rows(), 2 * h.rows());
    next << h, h, h, -h;
    h = next;
  }
  const Eigen::VectorXd d = Eigen::Map<const Eigen::VectorXd>(t->signs().data(), n);
  EXPECT_EQ(d.cwiseAbs().minCoeff(), 1.0);
  EXPECT_EQ(d.cwiseAbs().maxCoeff(), 1.0);
  EXPECT_LT(d.sum(), n);  // not all +1
  EXPECT_GT(d.sum(), -n);
  const std::vector<float> g = testing::AnisotropicMatrix(d_out, n, 51);
  std::vector<float> x(g.size());
  ASSERT_TRUE(t->Forward(g.data(), d_out, n, x.data()).ok());
  const Eigen::MatrixXd want =
      testing::ToMatrix(g, d_out, n) * h * d.asDiagonal() / std::sqrt(double(n));
  const Eigen::MatrixXd got = testing::ToMatrix(x, d_out, n);
  EXPECT_LE((got - want).norm() / want.norm(), 1e-6);

  // Norm preserved per row and in total, on a larger power-of-two shape.
  auto big = HadamardTransform::Create(32, 1024);
  ASSERT_TRUE(big.ok());
  const std::vector<float> gb = testing::AnisotropicMatrix(32, 1024, 52);
  std::vector<float> xb(gb.size());
  ASSERT_TRUE(big->Forward(gb.data(), 32, 1024, xb.data()).ok());
  const Eigen::MatrixXd mg = testing::ToMatrix(gb, 32, 1024), mx = testing::ToMatrix(xb, 32, 1024);
  const double norm_err = std::abs(mx.norm() - mg.norm()) / mg.norm();
  const double row_err =
      ((mx.rowwise().norm() - mg.rowwise().norm()).array().abs() / mg.rowwise().norm().array())
          .maxCoeff();
  std::cout << "[ hadamard ] 32x1024: Frobenius rel diff " << norm_err << ", worst row " << row_err
            << "; amax " << mg.cwiseAbs().maxCoeff() << " -> " << mx.cwiseAbs().maxCoeff() << "\n";
  EXPECT_LE(norm_err, 1e-6);
  EXPECT_LE(row_err, 1e-6);
}

TEST(Hadamard, SeedDeterminesTheSigns) {
  auto a = HadamardTransform::Create(2, 64, {.seed = 1});
  auto b = HadamardTransform::Create(2, 64, {.seed = 1});
  auto c = HadamardTransform::Create(2, 64, {.seed = 2});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->signs(), b->signs());
  EXPECT_NE(a->signs(), c->signs());
}

// Decision: no padding. A d_in that is not a power of two is refused unless
// the caller names a power-of-two block dividing it; the rotation is then
// block-diagonal (each block its own H D / sqrt(b)), still orthogonal.
TEST(Hadamard, NonPowerOfTwoNeedsADividingPowerOfTwoBlock) {
  EXPECT_EQ(HadamardTransform::Create(4, 96).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HadamardTransform::Create(4, 96, {.block = 64}).status().code(),
            absl::StatusCode::kInvalidArgument);  // does not divide 96
  EXPECT_EQ(HadamardTransform::Create(4, 96, {.block = 48}).status().code(),
            absl::StatusCode::kInvalidArgument);  // not a power of two
  EXPECT_EQ(HadamardTransform::Create(4, 64, {.block = 128}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HadamardTransform::Create(0, 64).status().code(), absl::StatusCode::kInvalidArgument);

  auto t = HadamardTransform::Create(4, 96, {.block = 32});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "hadamard(block=32)");
  const std::vector<float> g = testing::AnisotropicMatrix(4, 96, 61);
  std::vector<float> x(g.size()), back(g.size());
  ASSERT_TRUE(t->Forward(g.data(), 4, 96, x.data()).ok());
  ASSERT_TRUE(t->Inverse(x.data(), 4, 96, back.data()).ok());
  EXPECT_LE(RelativeL2(back, g), kRoundTripTolerance);
  // Block-diagonal: each 32-column block keeps its own norm.
  const Eigen::MatrixXd mg = testing::ToMatrix(g, 4, 96), mx = testing::ToMatrix(x, 4, 96);
  for (int64_t b = 0; b < 3; ++b) {
    const double ng = mg.middleCols(b * 32, 32).norm(), nx = mx.middleCols(b * 32, 32).norm();
    EXPECT_NEAR(nx, ng, 1e-6 * ng) << "block " << b;
  }
}

TEST(ReferenceTransforms, RefuseWrongShapesAndNonFiniteInputLeavingOutputUntouched) {
  const std::vector<std::shared_ptr<const GradientTransform>> transforms = {
      Shared(IdentityTransform::Create(4, 16)),
      Shared(DenseWhiteningTransform::Create(DecayingFactor(16, 3), 4, 4)),
      Shared(HadamardTransform::Create(4, 16)),
      testing::TwoSidedBasis(4, 16, 0.25, 2, 9),
  };
  std::vector<float> g = testing::AnisotropicMatrix(4, 16, 71);
  for (const auto& t : transforms) {
    std::vector<float> out(g.size(), 7.0f);
    EXPECT_EQ(t->Forward(g.data(), 4, 8, out.data()).code(), absl::StatusCode::kInvalidArgument)
        << t->name();
    EXPECT_EQ(t->Inverse(g.data(), 2, 16, out.data()).code(), absl::StatusCode::kInvalidArgument)
        << t->name();
    EXPECT_EQ(t->Forward(nullptr, 4, 16, out.data()).code(), absl::StatusCode::kInvalidArgument)
        << t->name();
    std::vector<float> bad = g;
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(t->Forward(bad.data(), 4, 16, out.data()).code(), absl::StatusCode::kInvalidArgument)
        << t->name();
    bad[5] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(t->Inverse(bad.data(), 4, 16, out.data()).code(), absl::StatusCode::kInvalidArgument)
        << t->name();
    for (float v : out) ASSERT_EQ(v, 7.0f) << t->name();
  }
  EXPECT_EQ(IdentityTransform::Create(0, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
