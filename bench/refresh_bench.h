// `gift-bench refresh`: the cost of a basis refresh of one weight gradient
// (issue 14, item 5), on the CPU and, with --gpu, on the GPU:
//
//   update: one statistics EMA step of both sides from one gradient
//           (CPU: SecondMomentEma, dsyrk in double on the BLAS threads;
//           GPU: SideStatisticsCuda, cublasSsyrk in FP32)
//   basis:  the TensorBasis (both sides, isotropic residual, rank r) from
//           those statistics (CPU: SideBasis::FromFactor, TopEigenpairs's
//           products in Eigen on one thread; GPU:
//           TensorBasisFromStatisticsCuda, kernels/transform/refresh_cuda.h)
//
// on --shapes (default 4096x4096,4096x11008) at each of --ranks (default
// 64,128), the CPU once per measurement (no warm-up: it takes seconds; only
// where both dimensions are <= --cpu-max-dim, otherwise the GPU rows have no
// ratio), the GPU as the median of --reps after one warm-up, wall clock
// including the host part of the refresh. Prints CPU / GPU ratios and the
// GPU basis's action on the gradient against the CPU basis's (relative
// Frobenius error). The gradient's EMA is the same matrix after any number
// of updates (every update folds in the same gradient), so the two bases are
// built from the same statistics. Without a device or without CUDA the GPU
// part is skipped with its reason (not an error).
#ifndef GIFT_BENCH_REFRESH_BENCH_H_
#define GIFT_BENCH_REFRESH_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct RefreshBenchOptions {
  std::vector<std::string> shapes;  // "ROWSxCOLS"; empty: 4096x4096, 4096x11008
  std::vector<int64_t> ranks;       // empty: 64, 128
  int reps = 3;                     // GPU timed runs (median)
  int64_t cpu_max_dim = 1 << 20;    // CPU refresh only where d_out, d_in <= this (0: never)
  uint64_t seed = 1;
  bool gpu = false;
  std::string json_path;  // "" none, "-" stdout
};

// Registers `refresh` on `parent`.
Command AddRefreshCommand(CLI::App& parent);

absl::Status RunRefreshBench(const RefreshBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_REFRESH_BENCH_H_
