// `gift-bench codec`: throughput of the CPU codec (encode, decode,
// decode-accumulate, reduce) against memcpy of the same FP32 input, one
// thread against one thread and all threads against all threads, plus the
// same on the GPU when one is present (codec_bench_cuda.h).
//
// Target checked (reported, never an exit status): CPU encode at least half
// of memcpy's input rate, thread for thread.
#ifndef GIFT_BENCH_CODEC_BENCH_H_
#define GIFT_BENCH_CODEC_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct CodecBenchOptions {
  std::vector<std::string> specs;  // empty: DefaultCodecSpecs() and "fp32"
  double mib = 64;                 // FP32 input size
  uint64_t cols = 4096;
  int reps = 5;
  int reduce_inputs = 4;
  int threads = 0;  // 0: std::thread::hardware_concurrency()
  uint64_t seed = 1;
  bool use_simd = true;
  bool gpu = true;        // run the GPU part when built with CUDA and a device is present
  std::string json_path;  // "" none, "-" stdout
};

// Registers `codec` on `parent`.
Command AddCodecCommand(CLI::App& parent);

absl::Status RunCodecBench(const CodecBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CODEC_BENCH_H_
