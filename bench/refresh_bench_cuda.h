// The GPU part of `gift-bench refresh` (refresh_bench.h) for one shape:
// the statistics EMA step of both sides and, per rank, the TensorBasis from
// them (kernels/transform/refresh_cuda.h), wall-clock medians of `reps`
// runs after one warm-up, each run ending with the stream synchronized.
//
// Only compiled into gift-bench when CUDA is on (GIFT_BENCH_WITH_CUDA). This
// header needs no CUDA headers.
#ifndef GIFT_BENCH_REFRESH_BENCH_CUDA_H_
#define GIFT_BENCH_REFRESH_BENCH_CUDA_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/transform/tensor_basis.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct GpuRefreshShapeConfig {
  int64_t d_out = 0;
  int64_t d_in = 0;
  std::vector<int64_t> ranks;
  const std::vector<float>* gradient = nullptr;  // d_out * d_in host floats, row-major
  int reps = 3;
  double decay = 0.95;
  // Called with each rank's GPU-built basis (for the caller's comparison
  // with the CPU); may be empty.
  std::function<void(int64_t rank, const transform::TensorBasis& gpu_basis)> on_basis;
};

// {"update_s": median, "bases": [{"rank", "basis_s"}...]}; errors (no
// memory, a failed call) are returned as such.
absl::StatusOr<nlohmann::json> RunGpuRefreshShape(const GpuRefreshShapeConfig& config);

}  // namespace gift::bench

#endif  // GIFT_BENCH_REFRESH_BENCH_CUDA_H_
