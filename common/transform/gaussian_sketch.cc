#include "common/transform/gaussian_sketch.h"

#include <cmath>
#include <numbers>
#include <random>

namespace gift::transform {

Eigen::MatrixXd GaussianSketch(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng] {
    // 53 random bits in (0, 1].
    return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
  };
  Eigen::MatrixXd omega(rows, cols);
  double* data = omega.data();
  const int64_t size = rows * cols;
  for (int64_t i = 0; i < size; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * std::numbers::pi * uniform();
    data[i] = radius * std::cos(angle);
    if (i + 1 < size) data[i + 1] = radius * std::sin(angle);
  }
  return omega;
}

}  // namespace gift::transform
