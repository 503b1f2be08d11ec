// `gift-bench transform`: the cost of the geometry-aware transform around
// quantization, against quantizing directly (issue 3, item 7):
//
//   direct       Encode(G)                 vs  transform + quantize  Encode(T(G))
//   direct       Decode                    vs  dequantize + inverse  T^{-1}(Decode)
//
// on the shapes 1280x3456, 3456x1280 and 4096x4096 (--shapes), a two-sided
// isotropic TensorBasis of rank 32 (--rank) at p = 1/4 (--power), codec
// e4m3/block128 (--spec). The basis is synthetic (random orthonormal
// eigenvectors, a decaying spectrum): its cost does not depend on its
// values. CPU: on 1 thread and on all threads (--threads): the codec on its
// ThreadPool and TensorBasis's FP32 SGEMMs on as many OpenBLAS threads
// (blas_runtime.h); the FP32 forward alone, with GFLOP/s, beside a plain
// unfused CBLAS forward of the same operator (bench/plain_blas_forward.h),
// and the double reference once with the FP32 path's error. GPU (when built with CUDA and a
// device is present; bench/transform_bench_cuda.h): TensorBasisCuda + the
// CUDA codec against EncodeCuda / DecodeCuda alone, with a device-copy
// baseline. The published dense form is reported for reference:
// DenseWhiteningTransform on the CPU (O(d_out d_in^2): only where d_in <=
// --dense-max-din) and one dense d_in x d_in SGEMM on the GPU.
//
// Targets reported (never an exit status): on the CPU, forward + encode at
// most 6x direct encode and the FP32 forward at most 1.5x the plain-BLAS
// one; on the GPU, transform + quantize at most 1.5x direct quantize.
#ifndef GIFT_BENCH_TRANSFORM_BENCH_H_
#define GIFT_BENCH_TRANSFORM_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct TransformBenchOptions {
  std::vector<std::string> shapes;  // "ROWSxCOLS"; empty: 1280x3456, 3456x1280, 4096x4096
  int64_t rank = 32;
  double power = 0.25;
  std::string spec = "e4m3/block128";
  int reps = 3;
  int threads = 0;               // 0: std::thread::hardware_concurrency()
  int64_t dense_max_din = 1280;  // CPU dense form only up to this d_in (0: never)
  uint64_t seed = 1;
  bool cpu = true;  // time the CPU paths (the GPU part's CPU reference is computed anyway)
  bool gpu = true;
  std::string json_path;  // "" none, "-" stdout
};

// Registers `transform` on `parent`.
Command AddTransformCommand(CLI::App& parent);

absl::Status RunTransformBench(const TransformBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_TRANSFORM_BENCH_H_
