// Synthetic two-sided TensorBasis for the benches that time a transform
// (`gift-bench transform`, `gift-bench gpu-share`): random orthonormal
// eigenvectors and a decaying spectrum. A basis's cost does not depend on its
// values, only on its shape and rank.
//
// Thread safety: pure functions of their arguments.
#ifndef GIFT_BENCH_SYNTHETIC_BASIS_H_
#define GIFT_BENCH_SYNTHETIC_BASIS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/transform/low_rank_eigen.h"
#include "common/transform/tensor_basis.h"

namespace gift::bench {

// Eigenpairs of an n x n factor: r random orthonormal vectors (QR of a
// seeded Gaussian), lam_j = (j + 1)^-1.5, and a tail holding 20% of the
// trace. Deterministic for a seed. Requires 1 <= r <= n.
transform::LowRankEigenpairs SyntheticEigenpairs(int64_t n, int64_t r, uint64_t seed);

// A two-sided isotropic TensorBasis of d_out x d_in at power p, rank
// min(rank, side) per side, from SyntheticEigenpairs (seeds `seed` for the
// output side and `seed + 1` for the input side). Errors of
// SideBasis::FromEigenpairs / TensorBasis::Create (InvalidArgument).
absl::StatusOr<transform::TensorBasis> MakeSyntheticBasis(int64_t d_out, int64_t d_in, int64_t rank,
                                                          double power, uint64_t seed);

}  // namespace gift::bench

#endif  // GIFT_BENCH_SYNTHETIC_BASIS_H_
