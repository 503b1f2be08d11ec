// The two roles of `gift-bench gpu-share` (gpu_share_bench.h) on the GPU:
// each sets up on its own stream, prints a "ready" JSON line, runs until
// `options.seconds` have passed or `stop` is set (checked between
// iterations / steps), printing "window" lines and a final "summary" line to
// `out`, one JSON object per line, flushed.
//
// Only compiled into gift-bench when CUDA is on (GIFT_BENCH_WITH_CUDA); the
// caller has checked that a device is present and the options are valid.
// This header needs no CUDA headers.
//
// Thread safety: one role per process; `stop` may be set from a signal
// handler.
#ifndef GIFT_BENCH_GPU_SHARE_BENCH_CUDA_H_
#define GIFT_BENCH_GPU_SHARE_BENCH_CUDA_H_

#include <atomic>
#include <iosfwd>

#include "absl/status/status.h"
#include "bench/gpu_share_bench.h"

namespace gift::bench {

absl::Status RunGpuShareTrainer(const GpuShareOptions& options, const std::atomic<bool>& stop,
                                std::ostream& out);
absl::Status RunGpuShareWorker(const GpuShareOptions& options, const std::atomic<bool>& stop,
                               std::ostream& out);

}  // namespace gift::bench

#endif  // GIFT_BENCH_GPU_SHARE_BENCH_CUDA_H_
