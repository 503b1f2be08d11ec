// The GPU part of `gift-bench codec`: EncodeCuda / DecodeCuda / ReduceCuda
// timed with CUDA events against cudaMemcpyDeviceToDevice of the same FP32
// bytes, and a bit-exactness check of the GPU results against the CPU codec.
//
// Only compiled into gift-bench when CUDA is on (GIFT_BENCH_WITH_CUDA). This
// header needs no CUDA headers, so the CPU code can include it either way.
#ifndef GIFT_BENCH_CODEC_BENCH_CUDA_H_
#define GIFT_BENCH_CODEC_BENCH_CUDA_H_

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct GpuBenchConfig {
  std::vector<codec::CodecSpec> specs;
  const std::vector<float>* input = nullptr;  // rows * cols host floats
  uint64_t rows = 0;
  uint64_t cols = 0;
  int reps = 5;
  int reduce_inputs = 4;
  ThreadPool* pool = nullptr;  // for the CPU reference results
  bool use_simd = true;        // for the CPU reference results
};

// Empty when a CUDA device can be used; otherwise a sentence saying why not.
std::string GpuUnavailableReason();

// Runs the GPU measurements, printing a table to `table` as it goes, and
// returns all numbers as JSON ({"ran": true, ...}). A spec that fails on the
// GPU is reported (table and JSON "errors") and the others still run; setup
// failures (no memory for the input, no stream) are returned as errors.
absl::StatusOr<nlohmann::json> RunGpuCodecBench(const GpuBenchConfig& config, std::ostream& table);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CODEC_BENCH_CUDA_H_
