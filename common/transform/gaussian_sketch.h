// Reproducible Gaussian test matrices for randomized linear algebra
// (low_rank_eigen.cc, moment_sketch.cc).
//
// Standard normal samples by Box-Muller over std::mt19937_64, whose output is
// fixed by the C++ standard (unlike std::normal_distribution's algorithm), so
// every process and platform draws the same matrix for the same seed.
//
// Thread safety: a reentrant function.
#ifndef GIFT_COMMON_TRANSFORM_GAUSSIAN_SKETCH_H_
#define GIFT_COMMON_TRANSFORM_GAUSSIAN_SKETCH_H_

#include <Eigen/Dense>
#include <cstdint>

namespace gift::transform {

// rows x cols standard normal samples, filled in column-major order.
Eigen::MatrixXd GaussianSketch(int64_t rows, int64_t cols, uint64_t seed);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_GAUSSIAN_SKETCH_H_
