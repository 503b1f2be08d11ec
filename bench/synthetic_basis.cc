#include "bench/synthetic_basis.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>

#include "common/base/status_macros.h"
#include "common/transform/side_basis.h"

namespace gift::bench {
namespace {

// n x k with orthonormal columns (QR of a seeded Gaussian).
Eigen::MatrixXd RandomOrthonormal(int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd g(n, k);
  for (Eigen::Index i = 0; i < g.size(); ++i) g.data()[i] = normal(rng);
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
  return qr.householderQ() * Eigen::MatrixXd::Identity(n, k);
}

}  // namespace

transform::LowRankEigenpairs SyntheticEigenpairs(int64_t n, int64_t r, uint64_t seed) {
  transform::LowRankEigenpairs eig;
  eig.vectors = RandomOrthonormal(n, r, seed);
  eig.values.resize(r);
  for (int64_t j = 0; j < r; ++j) eig.values(j) = std::pow(1.0 + j, -1.5);
  eig.trace = eig.values.sum() / 0.8;
  return eig;
}

absl::StatusOr<transform::TensorBasis> MakeSyntheticBasis(int64_t d_out, int64_t d_in, int64_t rank,
                                                          double power, uint64_t seed) {
  const transform::SideBasisOptions side_options;  // isotropic
  GIFT_ASSIGN_OR_RETURN(
      transform::SideBasis out_side,
      transform::SideBasis::FromEigenpairs(SyntheticEigenpairs(d_out, std::min(rank, d_out), seed),
                                           Eigen::VectorXd(), d_out, side_options));
  GIFT_ASSIGN_OR_RETURN(transform::SideBasis in_side,
                        transform::SideBasis::FromEigenpairs(
                            SyntheticEigenpairs(d_in, std::min(rank, d_in), seed + 1),
                            Eigen::VectorXd(), d_in, side_options));
  transform::TensorBasisHeader header;
  header.d_out = d_out;
  header.d_in = d_in;
  header.config.sides = transform::Sides::kBoth;
  header.config.power = power;
  return transform::TensorBasis::Create(header, std::move(out_side), std::move(in_side));
}

}  // namespace gift::bench
