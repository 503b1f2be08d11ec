// A gradient NVFP4 carries (nearly) exactly and E4M3 block-128 does not, for
// tests of the fidelity target: every 16-element block holds one +-6 and
// fifteen values of the E2M1 grid {0, 0.5, 1, 1.5, 2, 3, 4} with random
// signs. NVFP4's scales make each block's scale 6 / 6 = 1 (its error is
// FP32 rounding of the scales); E4M3 block-128 scales 6 to 448, and 1, 2,
// 4 ... land between its codes (1 -> 74.7, error about 3 %).
#ifndef GIFT_TESTS_WORKER_NVFP4_GRID_H_
#define GIFT_TESTS_WORKER_NVFP4_GRID_H_

#include <cstdint>
#include <random>
#include <vector>

namespace gift::test {

inline std::vector<float> Nvfp4Grid(int64_t rows, int64_t cols, uint32_t seed) {
  static constexpr float kGrid[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};
  std::mt19937 rng(seed);
  std::vector<float> g(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < g.size(); ++i) {
    const float sign = (rng() & 1) ? 1.0f : -1.0f;
    g[i] = sign * (i % 16 == 0 ? 6.0f : kGrid[rng() % 7]);
  }
  return g;
}

}  // namespace gift::test

#endif  // GIFT_TESTS_WORKER_NVFP4_GRID_H_
