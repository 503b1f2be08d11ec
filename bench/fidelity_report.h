// `gift-bench fidelity`: how much each format loses on synthetic, anisotropic
// gradients, or, with --grads, on real per-worker gradients read from .npy
// files through the transform method grid (fidelity_methods.h).
//
// The synthetic report:
// For each shape R x C, G = sum_k s_k u_k v_k^T + noise, with s_k = k^-decay
// for k = 1..rank, orthonormal u_k, v_k drawn from a seeded std::mt19937, and
// Gaussian noise of `noise` times G's RMS. For each codec spec it reports:
//   - relative L2 error ||decode(encode(G)) - G|| / ||G||,
//   - max over elements of |error| / codec::ElementErrorBound (must be <= 1;
//     the effective scale of each element is read back from the encoding),
//   - bits per element, scales included,
//   - the relative L2 error of the average of P workers (G_p = G + independent
//     noise of `worker_noise` times G's RMS, each encoded with RngKey rank p)
//     computed by codec::ReduceEncoded(post_scale = 1/P), against the exact
//     average, both for the FP32 sum and for its re-encoding.
// A bound violation is a codec bug: the report is printed in full and the
// command then fails.
#ifndef GIFT_BENCH_FIDELITY_REPORT_H_
#define GIFT_BENCH_FIDELITY_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"
#include "bench/fidelity_methods.h"

namespace gift::bench {

struct FidelityOptions {
  std::vector<std::string> shapes;  // "RxC"; empty: 1024x1024, 512x2048
  std::vector<std::string> specs;   // empty: DefaultFidelitySpecs()
  uint64_t seed = 1;
  int workers = 8;
  int rank = 64;
  double decay = 1.0;         // s_k = k^-decay
  double noise = 1e-3;        // relative to the low-rank part's RMS
  double worker_noise = 0.5;  // relative to G's RMS
  bool use_simd = true;       // the codec's AVX2 loops where available
  int threads = 0;            // 0: hardware threads
  std::string json_path;      // "" none, "-" stdout
  // With real.grads non-empty the command runs RunRealGradientFidelity with
  // `real` (specs, threads, use_simd and json_path taken from above) and the
  // synthetic options are unused.
  RealFidelityOptions real;
};

// The codec bench's default specs plus e5m2/block128, e4m3/mx128 and
// e5m2/tensor/sr.
const std::vector<std::string>& DefaultFidelitySpecs();

// Registers `fidelity` on `parent`: the synthetic report, or with --grads the
// real-gradient method grid.
Command AddFidelityCommand(CLI::App& parent);

absl::Status RunFidelityReport(const FidelityOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_FIDELITY_REPORT_H_
