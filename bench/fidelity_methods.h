// The real-gradient method grid of `gift-bench fidelity --grads ...`: how
// much error each transform + codec adds to the average of P workers'
// gradients of one 2-D tensor, measured exactly as the servers would form it.
//
// Inputs: the P per-worker gradients G_0 .. G_{P-1} of one step (d_out x
// d_in, row-major FP32) and optional statistics a basis owner would hold from
// earlier steps (GridStatistics). Methods, for every codec spec:
//   direct       identity transform (the baseline)
//   hadamard     randomized Hadamard rotation on the input side, block = the
//                largest power of two dividing d_in
//   dense        the published dense whitening (input side, p = 1/2,
//                DenseWhiteningTransform) from the activation factor, or
//                without one from the best gradient statistic available
//                (ema-per-worker, ema-mean, step-per-worker in that order), at
//                the largest requested rank
//   family       TensorBasisTransform for every sides (both, input, output) x
//                power x source x rank x residual (isotropic, diagonal)
// Sources of the family's statistics (input side: d_in x d_in, output side:
// d_out x d_out):
//   step-mean        this step's exact average Gbar: Gbar^T Gbar / d_out,
//                    Gbar Gbar^T / d_in (not causal: uses the step being sent)
//   step-per-worker  mean_i G_i^T G_i / d_out, mean_i G_i G_i^T / d_in (not
//                    causal)
//   ema-mean         GridStatistics::gram_in / gram_out (EMA of earlier steps)
//   ema-per-worker   GridStatistics::pw_gram_in / pw_gram_out
//   activations      GridStatistics::factor on the input side; with both sides
//                    the output side comes from ema-per-worker, else ema-mean,
//                    else step-per-worker (named in the source field, e.g.
//                    "activations+ema-per-worker"); no output-only variant
// With a sketch size k > 0 (--sketch-size) every family side basis is built
// as a basis owner with sketched statistics builds it: from the Nystrom
// eigenpairs of the statistic's k-column sketch (MomentSketch seeded by the
// side, MatrixContribution; by linearity the sketch of an EMA is the EMA of
// the sketches) with its exact trace and diagonal, the rank clamped to k;
// k = 0 decomposes the statistic itself. The per-worker sources' sketches
// (step-per-worker, ema-per-worker) travel: with a sketch codec they pass
// through it first (MethodGridOptions::sketch_codec).
// A family configuration is measured only when its source has every side it
// needs. A rank r is clipped to each side's dimension; rank 0 means full rank.
//
// Measurement of one method T with codec spec Q (RngKey{tensor_id, step,
// rank = w} for worker w), all norms Frobenius, reference values in double:
//   X_w = T(G_w);  C_w = encode_Q(X_w)
//   rel_l2_single = ||T^{-1}(decode(C_0)) - G_0|| / ||G_0||   (worker 0 alone)
//   cos_single    = cosine between T^{-1}(decode(C_0)) and G_0
//   avg_q         = T^{-1}(codec::ReduceEncoded({C_w}, post_scale = 1/P))
//   rel_l2_avg    = ||avg_q - avg|| / ||avg||,  avg = (1/P) sum_w G_w (exact)
//   cos_avg       = cosine between avg_q and avg
//   underflow_frac  = over all P workers, among the elements of X_w that are
//                     nonzero, the fraction whose decoded value is 0
//   saturation_frac = over all P workers' elements, the fraction clipped by
//                     the format beyond its rounding error: |x| > m + b, with
//                     m = FormatMax(format) * s, s the element's
//                     codec::EffectiveScale, b = codec::ElementErrorBound at m
//                     (so an amax element that lands on the max, or exceeds it
//                     by the FP32 rounding of its scale, is not counted; an
//                     NVFP4 element cut by its E4M3 block scale's rounding is)
//   ratio_vs_direct = rel_l2_avg / rel_l2_avg of direct with the same spec
//
// Thread safety: MeasureMethodGrid is reentrant; it uses the options' pool
// (not owned) for independent methods, and results do not depend on it.
#ifndef GIFT_BENCH_FIDELITY_METHODS_H_
#define GIFT_BENCH_FIDELITY_METHODS_H_

#include <Eigen/Dense>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

// The P gradients of one tensor, each d_out x d_in row-major.
struct WorkerGradients {
  int64_t d_out = 0;
  int64_t d_in = 0;
  std::vector<std::vector<float>> workers;
};

// Statistics from earlier steps; each optional, symmetric PSD when present.
struct GridStatistics {
  std::optional<Eigen::MatrixXd> factor;       // activation factor, d_in x d_in
  std::optional<Eigen::MatrixXd> gram_in;      // EMA of Gbar^T Gbar, d_in x d_in
  std::optional<Eigen::MatrixXd> gram_out;     // EMA of Gbar Gbar^T, d_out x d_out
  std::optional<Eigen::MatrixXd> pw_gram_in;   // EMA of mean_i G_i^T G_i, d_in x d_in
  std::optional<Eigen::MatrixXd> pw_gram_out;  // EMA of mean_i G_i G_i^T, d_out x d_out
};

struct MethodGridOptions {
  std::vector<codec::CodecSpec> specs;  // non-empty
  std::vector<int64_t> ranks = {8, 32, 64};
  std::vector<double> powers = {0.125, 0.25, 0.5};
  // A method is measured only when its name (MethodResult::method) contains
  // every one of these substrings; direct is always measured.
  std::vector<std::string> filter;
  int64_t sketch_size = 0;  // >= 0; see above
  // With sketch_size > 0: the codec the per-worker sources' sketches travel
  // in (the policy's transform.statistics_codec). The owner's statistic is
  // then the EMA (decay 0.95, the policy's default) over `sketch_steps`
  // collect steps of the sketch (with its diagonal and trace, laid out as a
  // statistics tensor) as it arrives: each of the P workers pushes it in the
  // codec, rounded with its own key, the server averages the decoded pushes
  // and pulls the average in the codec, afresh each step. Stochastic
  // rounding averages out over the workers and the steps as in the product;
  // nearest rounding of this one fixed sketch does not (a bound: in the
  // product each worker rounds its own sketch, which changes every step).
  // The EMA's Nystrom shift follows the codec's rounding as the owner's does
  // (policy::WireNoise). Unset: the sketch arrives exact.
  std::optional<codec::CodecSpec> sketch_codec;
  int64_t sketch_steps = 40;  // >= 1
  // > 0: every method (direct too) followed by a randomized Hadamard
  // rotation of each row in blocks of this many elements (a power of two
  // dividing d_in), seeded by tensor_id; names end "+rht<B>".
  int64_t rotate_block = 0;
  uint64_t tensor_id = 1;  // of the RngKey
  uint64_t step = 0;       // of the RngKey
  bool use_simd = true;
  ThreadPool* pool = nullptr;  // not owned; null runs on the calling thread
};

struct MethodResult {
  // E.g. "direct", "hadamard", "dense/activations/r64",
  // "family/both/p0.25/ema-per-worker/r64/iso".
  std::string method;
  std::string transform;  // GradientTransform::name()
  std::string spec;       // codec::ToString
  std::string format;     // "e4m3", ...
  std::string scaling;    // "tensor", "block128", "nvfp4", "none", ...
  std::string sides;      // "none", "input", "output", "both"
  std::string source;     // "none" or a source above
  std::string residual;   // "none", "isotropic", "diagonal"
  double power = 0;       // 0 for direct and hadamard
  int64_t rank = 0;       // as requested (0: full, or none)
  double rel_l2_single = 0;
  double cos_single = 0;
  double rel_l2_avg = 0;
  double cos_avg = 0;
  double underflow_frac = 0;
  double saturation_frac = 0;
  double ratio_vs_direct = 0;
};

// Measures every method on `grads` (P >= 1 workers, all d_out x d_in). Fails
// (InvalidArgument) on inconsistent shapes, a statistic of the wrong shape or
// with non-finite values, an empty spec list, a power <= 0, a rank < 0; and
// with the transform and codec errors, naming the method. A family or dense
// configuration whose basis cannot be built (e.g. a statistic with zero
// trace) is an error too. Results come per method in a fixed order: for each
// method, one entry per spec in the order given.
absl::StatusOr<std::vector<MethodResult>> MeasureMethodGrid(const WorkerGradients& grads,
                                                            const GridStatistics& stats,
                                                            const MethodGridOptions& options);

// The object written to JSON for one result (every field above).
nlohmann::json MethodResultJson(const MethodResult& result);

// `gift-bench fidelity --grads ...`: loads the files, measures the grid,
// prints a table and a summary per spec, and writes the JSON list.
struct RealFidelityOptions {
  std::vector<std::string> grads;                                  // one .npy per worker, >= 1
  std::string factor, gram_in, gram_out, pw_gram_in, pw_gram_out;  // "" = absent
  std::vector<std::string> specs;  // empty: DefaultRealFidelitySpecs()
  std::vector<int64_t> ranks = {8, 32, 64};
  std::vector<double> powers = {0.125, 0.25, 0.5};
  std::vector<std::string> filter;
  int64_t sketch_size = 0;
  // The per-worker sketches' codec (MethodGridOptions::sketch_codec when
  // sketch_size > 0; the target choice's statistics bytes in any case).
  std::string sketch_codec = "bf16";
  int64_t sketch_steps = 40;
  int64_t rotate_block = 0;
  // The fidelity target whose choice is printed (fidelity_target_choice.h);
  // "" prints none. Must be among the specs.
  std::string target;
  int threads = 0;  // 0: hardware threads
  bool use_simd = true;
  std::string json_path;  // "" none, "-" stdout
};

// e5m2/tensor, e4m3/block128, nvfp4, bf16.
const std::vector<std::string>& DefaultRealFidelitySpecs();

absl::Status RunRealGradientFidelity(const RealFidelityOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_FIDELITY_METHODS_H_
