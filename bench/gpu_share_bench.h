// `gift-bench gpu-share`: one side of the measurement of the worker's GPU
// work beside a training process's (issue 14, item 3). Kernels of two
// processes time-slice on one GPU unless CUDA MPS runs; scripts/gpu-share.sh
// starts one process of each role, alone, together and under MPS, and
// reports the trainer's slowdown (docs/gpu.md, "Sharing the GPU").
//
//   --role trainer  a stand-in for a backward pass: per iteration, for each
//                   of --layers transformer layers, the two gradient SGEMMs
//                   (dX = dY W, dW = dY^T X) of its four linear layers (QKV
//                   H -> 3H, attention output H -> H, gate + up H -> 2F,
//                   down F -> H) over --tokens rows; one stream at normal
//                   priority (--priority highest: the device's greatest);
//                   each iteration timed on the host, ended by a stream
//                   synchronization.
//   --role worker   the worker's per-step device work on one --shape tensor:
//                   TensorBasisCuda::Forward + EncodeCuda, then DecodeCuda +
//                   TensorBasisCuda::Inverse (rank --rank per side, codec
//                   --spec), at --rate steps per second (0: back to back), on
//                   a stream at the device's lowest priority (--priority
//                   normal: priority 0), as the worker daemon's device stage
//                   runs it.
//
// Output: JSON lines on stdout, flushed as written, each with "unix_s" (the
// wall clock when written, shared by both processes): {"event":"ready", ...}
// once set up (the worker's is the script's cue to start the trainer), a
// {"event":"window", ...} line every --report-every seconds, and one
// {"event":"summary", ...} line at the end (the trainer's iteration median
// and p90 in ms; the worker's steps per second and step median / p90). A
// role ends after --seconds, or at SIGTERM / SIGINT (after the step in
// flight, with its summary).
//
// Exit status: 0; 2 with "no CUDA device" on stderr when there is none (or
// gift-bench was built without CUDA); 1 on other errors.
#ifndef GIFT_BENCH_GPU_SHARE_BENCH_H_
#define GIFT_BENCH_GPU_SHARE_BENCH_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct GpuShareOptions {
  std::string role;  // "trainer" or "worker"
  double seconds = 10;
  double report_every_s = 1;
  std::string priority;  // trainer: normal | highest; worker: lowest | normal ("": the default)
  bool tf32 = false;     // TF32 tensor-core products (trainer's SGEMMs, worker's transform)
  // trainer
  int64_t tokens = 4096;
  int64_t hidden = 4096;
  int64_t ffn = 11008;
  int layers = 1;  // 3.3 TFLOP an iteration at the default sizes
  int warmup = 2;  // iterations not counted
  // worker
  std::string shape = "4096x4096";
  int64_t rank = 32;
  std::string spec = "e4m3/block128";
  double rate = 0;  // steps per second; 0: back to back
  uint64_t seed = 1;
};

// Registers `gpu-share` on `parent`.
Command AddGpuShareCommand(CLI::App& parent);

// Runs one role. FailedPrecondition "no CUDA device ..." without a device;
// InvalidArgument for bad options.
absl::Status RunGpuShare(const GpuShareOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_GPU_SHARE_BENCH_H_
