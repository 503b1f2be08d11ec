#include "bench/fidelity_report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/base/relative_error.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/reduce.h"

namespace gift::bench {
namespace {

using Shape = MatrixShape;

absl::StatusOr<Shape> ParseShape(const std::string& text) {
  return ParseMatrixShape(text, int64_t{1} << 31, int64_t{1} << 31);
}

CLI::Validator ShapeValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::StatusOr<Shape> s = ParseShape(text);
        return s.ok() ? std::string() : std::string(s.status().message());
      },
      "RxC", "shape");
}

// Worst |decoded - x| / ElementErrorBound over all elements, and where.
struct BoundCheck {
  double worst_ratio = 0;
  uint64_t row = 0, col = 0;
  double x = 0, decoded = 0, scale = 0, bound = 0;

  nlohmann::json ToJson() const {
    return {{"worst_error_over_bound", std::isfinite(worst_ratio) ? worst_ratio : 1e300},
            {"at_row", row},
            {"at_col", col},
            {"x", x},
            {"decoded", decoded},
            {"effective_scale", scale},
            {"bound", bound}};
  }
};

BoundCheck CheckBound(const codec::EncodedTensor& t, const float* x, const float* decoded) {
  BoundCheck worst;
  const uint64_t rows = t.layout().rows, cols = t.layout().cols;
  const codec::CodecSpec& spec = t.spec();
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = r * cols + c;
      const double xi = x[i], di = decoded[i];
      const double err = std::fabs(di - xi);
      if (err == 0) continue;
      const double scale = codec::EffectiveScale(t.view(), r, c);
      const double bound = codec::ElementErrorBound(spec.format, spec.rounding, scale, xi);
      double ratio = bound > 0 ? err / bound : std::numeric_limits<double>::infinity();
      if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
      if (ratio > worst.worst_ratio) worst = BoundCheck{ratio, r, c, xi, di, scale, bound};
    }
  }
  return worst;
}

// Modified Gram-Schmidt on the k columns of the n x k row-major matrix `m`
// (n >= k), in place.
void Orthonormalize(std::vector<double>& m, size_t n, size_t k) {
  for (size_t j = 0; j < k; ++j) {
    for (size_t p = 0; p < j; ++p) {
      double dot = 0;
      for (size_t i = 0; i < n; ++i) dot += m[i * k + j] * m[i * k + p];
      for (size_t i = 0; i < n; ++i) m[i * k + j] -= dot * m[i * k + p];
    }
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += m[i * k + j] * m[i * k + j];
    norm = std::sqrt(norm);
    for (size_t i = 0; i < n; ++i) m[i * k + j] /= norm;
  }
}

// G = sum_k k^-decay u_k v_k^T + Gaussian noise of `noise` x the low-rank
// part's RMS, as floats.
std::vector<float> MakeAnisotropicGradient(const Shape& shape, int rank_opt, double decay,
                                           double noise, std::mt19937& rng, int* rank_used) {
  const size_t R = shape.rows, C = shape.cols;
  const size_t k = std::min<size_t>({static_cast<size_t>(rank_opt), R, C});
  *rank_used = static_cast<int>(k);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> u(R * k), v(C * k);
  for (double& e : u) e = normal(rng);
  for (double& e : v) e = normal(rng);
  Orthonormalize(u, R, k);
  Orthonormalize(v, C, k);
  // vt[q][j] = s_q * v[j][q]: contiguous rows for the inner loop.
  std::vector<double> vt(k * C);
  double low_rank_sq = 0;
  for (size_t q = 0; q < k; ++q) {
    const double s = std::pow(static_cast<double>(q + 1), -decay);
    low_rank_sq += s * s;
    for (size_t j = 0; j < C; ++j) vt[q * C + j] = s * v[j * k + q];
  }
  // ||sum_k s_k u_k v_k^T||_F^2 = sum_k s_k^2 for orthonormal u, v.
  const double noise_sd = noise * std::sqrt(low_rank_sq / static_cast<double>(R * C));
  std::vector<float> g(R * C);
  std::vector<double> row(C);
  for (size_t i = 0; i < R; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (size_t q = 0; q < k; ++q) {
      const double a = u[i * k + q];
      const double* vq = &vt[q * C];
      for (size_t j = 0; j < C; ++j) row[j] += a * vq[j];
    }
    for (size_t j = 0; j < C; ++j) {
      g[i * C + j] = static_cast<float>(row[j] + noise_sd * normal(rng));
    }
  }
  return g;
}

struct SpecResult {
  std::string spec;
  double bits_per_element = 0;
  double rel_l2 = 0;
  BoundCheck bound;
  double avg_rel_l2 = 0;            // FP32 sum of ReduceEncoded vs exact average
  double avg_reencoded_rel_l2 = 0;  // decode(re-encoded average) vs exact average
  BoundCheck reencoded_bound;       // of the re-encoding of the FP32 average
};

absl::StatusOr<SpecResult> MeasureSpec(const codec::CodecSpec& spec, const Shape& shape,
                                       uint64_t tensor_id, const std::vector<float>& g,
                                       const std::vector<double>& g_exact,
                                       const std::vector<std::vector<float>>& workers,
                                       const std::vector<double>& exact_avg,
                                       const codec::CodecOptions& opts) {
  const size_t n = g.size();
  SpecResult res;
  res.spec = codec::ToString(spec);

  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor enc,
                        codec::EncodedTensor::Create(spec, shape.rows, shape.cols));
  GIFT_RETURN_IF_ERROR(codec::Encode(g.data(), enc.mutable_view(),
                                     codec::RngKey{.tensor = tensor_id, .step = 0, .rank = 0},
                                     opts));
  std::vector<float> decoded(n);
  GIFT_RETURN_IF_ERROR(codec::Decode(enc.view(), decoded.data(), opts));
  res.bits_per_element = 8.0 *
                         static_cast<double>(enc.layout().code_bytes + enc.layout().scale_bytes) /
                         static_cast<double>(n);
  res.rel_l2 =
      RelativeL2(absl::MakeConstSpan(decoded.data(), n), absl::MakeConstSpan(g_exact.data(), n));
  res.bound = CheckBound(enc, g.data(), decoded.data());

  // P workers, each encoded with its own rank, reduced to their average.
  const int P = static_cast<int>(workers.size());
  std::vector<codec::EncodedTensor> encoded_workers;
  std::vector<codec::EncodedView> views;
  encoded_workers.reserve(P);
  for (int p = 0; p < P; ++p) {
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                          codec::EncodedTensor::Create(spec, shape.rows, shape.cols));
    GIFT_RETURN_IF_ERROR(codec::Encode(
        workers[p].data(), t.mutable_view(),
        codec::RngKey{.tensor = tensor_id, .step = 0, .rank = static_cast<uint32_t>(p)}, opts));
    encoded_workers.push_back(std::move(t));
  }
  for (const codec::EncodedTensor& t : encoded_workers) views.push_back(t.view());
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor reencoded,
                        codec::EncodedTensor::Create(spec, shape.rows, shape.cols));
  std::vector<float> avg(n);
  GIFT_RETURN_IF_ERROR(codec::ReduceEncoded(
      views, avg.data(), 1.0f / static_cast<float>(P), reencoded.mutable_view(),
      codec::RngKey{.tensor = tensor_id, .step = 0, .rank = static_cast<uint32_t>(P)}, opts));
  res.avg_rel_l2 =
      RelativeL2(absl::MakeConstSpan(avg.data(), n), absl::MakeConstSpan(exact_avg.data(), n));
  GIFT_RETURN_IF_ERROR(codec::Decode(reencoded.view(), decoded.data(), opts));
  res.avg_reencoded_rel_l2 =
      RelativeL2(absl::MakeConstSpan(decoded.data(), n), absl::MakeConstSpan(exact_avg.data(), n));
  res.reencoded_bound = CheckBound(reencoded, avg.data(), decoded.data());
  return res;
}

absl::Status Run(const FidelityOptions& options) {
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  const std::vector<std::string>& spec_names =
      options.specs.empty() ? DefaultFidelitySpecs() : options.specs;
  GIFT_ASSIGN_OR_RETURN(std::vector<codec::CodecSpec> specs, ParseSpecs(spec_names));
  const std::vector<std::string> shape_names =
      options.shapes.empty() ? std::vector<std::string>{"1024x1024", "512x2048"} : options.shapes;
  std::vector<Shape> shapes;
  for (const std::string& s : shape_names) {
    GIFT_ASSIGN_OR_RETURN(Shape shape, ParseShape(s));
    shapes.push_back(shape);
  }
  if (options.workers < 1 || options.rank < 1) {
    return absl::InvalidArgumentError("--workers and --rank must be at least 1");
  }
  if (!(options.noise >= 0) || !(options.worker_noise >= 0) || !std::isfinite(options.decay)) {
    return absl::InvalidArgumentError("--noise and --worker-noise must be >= 0, --decay finite");
  }

  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads - 1);
  const int P = options.workers;

  os << absl::StrFormat(
      "gift-bench fidelity: G = sum_k k^-%g u_k v_k^T (rank %d, orthonormal u, v) + %g x RMS "
      "Gaussian noise; seed %d\n",
      options.decay, options.rank, options.noise, options.seed);
  os << absl::StrFormat(
      "average: P = %d workers, G_p = G + %g x RMS(G) independent noise, encoded with RngKey "
      "rank p,\n  codec::ReduceEncoded(post_scale = 1/%d) against the exact average\n",
      P, options.worker_noise, P);
  os << "columns: bits/el includes scales; rel err = ||decode(encode(G)) - G|| / ||G||;\n"
        "  err/bnd = max |error| / codec::ElementErrorBound (must be <= 1); avg err = FP32 "
        "average\n  from ReduceEncoded; re-enc = that average encoded again (what workers "
        "receive)\n";

  nlohmann::json doc;
  doc["command"] = "fidelity";
  doc["config"] = {
      {"seed", options.seed},   {"workers", P},           {"rank", options.rank},
      {"decay", options.decay}, {"noise", options.noise}, {"worker_noise", options.worker_noise},
      {"threads", threads},     {"specs", spec_names},    {"shapes", shape_names}};
  doc["shapes"] = nlohmann::json::array();

  std::vector<std::string> violations;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Shape& shape = shapes[si];
    const size_t n = shape.rows * shape.cols;
    std::mt19937 rng(static_cast<uint32_t>(options.seed * 1000003u + si));
    int rank_used = 0;
    const std::vector<float> g =
        MakeAnisotropicGradient(shape, options.rank, options.decay, options.noise, rng, &rank_used);
    std::vector<double> g_exact(g.begin(), g.end());
    double g_sq = 0, amax = 0;
    for (float e : g) {
      g_sq += static_cast<double>(e) * e;
      amax = std::max(amax, std::fabs(static_cast<double>(e)));
    }
    const double rms = std::sqrt(g_sq / static_cast<double>(n));

    std::vector<std::vector<float>> workers(P, std::vector<float>(n));
    std::vector<double> exact_avg(n, 0.0);
    std::normal_distribution<double> normal(0.0, options.worker_noise * rms);
    for (int p = 0; p < P; ++p) {
      for (size_t i = 0; i < n; ++i) {
        workers[p][i] = static_cast<float>(g[i] + normal(rng));
        exact_avg[i] += workers[p][i];
      }
    }
    for (double& e : exact_avg) e /= P;

    os << absl::StrFormat("\nshape %dx%d: rank %d, ||G|| = %.4g, RMS = %.3g, amax = %.3g\n",
                          shape.rows, shape.cols, rank_used, std::sqrt(g_sq), rms, amax);
    os << absl::StrFormat("%-16s %7s %10s %9s %11s %11s %9s\n", "spec", "bits/el", "rel err",
                          "err/bnd", "avg err", "re-enc err", "err/bnd");
    os.flush();

    nlohmann::json shape_json = {{"rows", shape.rows},
                                 {"cols", shape.cols},
                                 {"rank", rank_used},
                                 {"norm", std::sqrt(g_sq)},
                                 {"rms", rms},
                                 {"amax", amax},
                                 {"results", nlohmann::json::array()}};
    for (const codec::CodecSpec& spec : specs) {
      absl::StatusOr<SpecResult> r =
          MeasureSpec(spec, shape, /*tensor_id=*/si + 1, g, g_exact, workers, exact_avg,
                      codec::CodecOptions{.pool = pool.get(), .use_simd = options.use_simd});
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat(codec::ToString(spec), " on ", shape.rows, "x", shape.cols,
                                         ": ", r.status().message()));
      }
      const bool ok = r->bound.worst_ratio <= 1.0;
      const bool re_ok = r->reencoded_bound.worst_ratio <= 1.0;
      WriteLine(os, absl::StrFormat("%-16s %7.3f %10.3e %9.6f%s %11.3e %11.3e %9.6f%s", r->spec,
                                    r->bits_per_element, r->rel_l2, r->bound.worst_ratio,
                                    ok ? " " : "!", r->avg_rel_l2, r->avg_reencoded_rel_l2,
                                    r->reencoded_bound.worst_ratio, re_ok ? " " : "!"));
      os.flush();
      auto bound_detail = [&](const char* what, const BoundCheck& b) {
        return absl::StrFormat(
            "%s %dx%d %s: error/bound = %.4g at (%d, %d): x = %.9g, decoded = %.9g, effective "
            "scale = %.9g, bound = %.4g",
            r->spec, shape.rows, shape.cols, what, b.worst_ratio, b.row, b.col, b.x, b.decoded,
            b.scale, b.bound);
      };
      if (!ok) violations.push_back(bound_detail("round trip", r->bound));
      if (!re_ok) violations.push_back(bound_detail("re-encoded average", r->reencoded_bound));
      shape_json["results"].push_back(
          {{"spec", r->spec},
           {"bits_per_element", r->bits_per_element},
           {"relative_l2_error", r->rel_l2},
           {"round_trip_bound", r->bound.ToJson()},
           {"average_relative_l2_error", r->avg_rel_l2},
           {"average_reencoded_relative_l2_error", r->avg_reencoded_rel_l2},
           {"reencoded_bound", r->reencoded_bound.ToJson()},
           {"within_bound", ok && re_ok}});
    }
    doc["shapes"].push_back(std::move(shape_json));
  }
  doc["bound_violations"] = violations;
  if (violations.empty()) {
    os << "\nall errors within codec::ElementErrorBound\n";
  } else {
    os << "\nBOUND VIOLATIONS (marked ! above):\n";
    for (const std::string& v : violations) os << "  " << v << '\n';
  }
  os.flush();
  GIFT_RETURN_IF_ERROR(sinks.WriteJson(doc));
  if (!violations.empty()) {
    return absl::InternalError(absl::StrCat(
        violations.size(), " case(s) exceed codec::ElementErrorBound; first: ", violations[0]));
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& DefaultFidelitySpecs() {
  static const auto* specs = [] {
    auto* v = new std::vector<std::string>(DefaultCodecSpecs());
    v->insert(v->end(), {"e5m2/block128", "e4m3/mx128", "e5m2/tensor/sr"});
    return v;
  }();
  return *specs;
}

Command AddFidelityCommand(CLI::App& parent) {
  auto options = std::make_shared<FidelityOptions>();
  CLI::App* app = parent.add_subcommand(
      "fidelity",
      "Round-trip error of each codec spec on synthetic low-rank-plus-noise gradients: relative "
      "L2 error, worst error against codec::ElementErrorBound (fails when above 1), bits per "
      "element, and the error of an average of P workers through codec::ReduceEncoded. With "
      "--grads: the error of each transform method (direct, Hadamard, dense whitening, the "
      "two-sided power family) + codec on real per-worker gradients read from .npy files, as a "
      "table and, with --json, a JSON list with one object per method and spec.");
  std::vector<CLI::Option*> synthetic;
  synthetic.push_back(
      app->add_option("--shapes", options->shapes,
                      "Comma-separated tensor shapes ROWSxCOLS (default: 1024x1024,512x2048)")
          ->delimiter(',')
          ->check(ShapeValidator()));
  app->add_option(
         "--specs", options->specs,
         "Comma-separated codec specs (default: " + absl::StrJoin(DefaultFidelitySpecs(), ",") +
             "; with --grads: " + absl::StrJoin(DefaultRealFidelitySpecs(), ",") + ")")
      ->delimiter(',')
      ->check(CodecSpecValidator());
  synthetic.push_back(app->add_option("--seed", options->seed, "Seed of the synthetic gradients")
                          ->capture_default_str());
  synthetic.push_back(
      app->add_option("--workers", options->workers, "Workers P averaged through ReduceEncoded")
          ->check(CLI::Range(1, 1024))
          ->capture_default_str());
  synthetic.push_back(app->add_option("--rank", options->rank, "Rank of the low-rank part")
                          ->check(CLI::Range(1, 4096))
                          ->capture_default_str());
  synthetic.push_back(app->add_option("--decay", options->decay, "Singular values s_k = k^-decay")
                          ->check(NonNegativeNumber())
                          ->capture_default_str());
  synthetic.push_back(
      app->add_option("--noise", options->noise, "Noise added to G, relative to its RMS")
          ->check(NonNegativeNumber())
          ->capture_default_str());
  synthetic.push_back(app->add_option("--worker-noise", options->worker_noise,
                                      "Per-worker noise, relative to G's RMS")
                          ->check(NonNegativeNumber())
                          ->capture_default_str());

  RealFidelityOptions& real = options->real;
  CLI::Option* grads =
      app->add_option("--grads", real.grads,
                      "Real mode: the per-worker gradients of one tensor, one 2-D .npy file per "
                      "worker (float16 or float32, C order, all the same shape)")
          ->delimiter(',')
          ->check(CLI::ExistingFile)
          ->type_name("W0.npy W1.npy ...");
  for (CLI::Option* o : synthetic) o->excludes(grads);
  auto statistic = [&](const char* flag, std::string* path, const char* what) {
    app->add_option(flag, *path, absl::StrCat("Real mode: ", what, " (square .npy, f2/f4/f8)"))
        ->check(CLI::ExistingFile)
        ->needs(grads)
        ->type_name("FILE");
  };
  statistic("--factor", &real.factor, "the activation factor X^T X / N, d_in x d_in");
  statistic("--gram-in", &real.gram_in, "EMA of Gbar^T Gbar / d_out of the mean gradient");
  statistic("--gram-out", &real.gram_out, "EMA of Gbar Gbar^T / d_in of the mean gradient");
  statistic("--pw-gram-in", &real.pw_gram_in,
            "EMA of the per-worker moments mean_i G_i^T G_i / d_out");
  statistic("--pw-gram-out", &real.pw_gram_out,
            "EMA of the per-worker moments mean_i G_i G_i^T / d_in");
  app->add_option("--ranks", real.ranks,
                  "Real mode: comma-separated ranks of the family (0: full rank)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 20))
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--powers", real.powers, "Real mode: comma-separated powers p of the family")
      ->delimiter(',')
      ->check(PositiveNumber())
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--sketch-size", real.sketch_size,
                  "Real mode: build every family basis from a Nystrom sketch of this many "
                  "columns of its statistic, as an owner with sketched statistics does (0: "
                  "decompose the statistic itself)")
      ->check(CLI::Range(0, 1 << 20))
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--sketch-codec", real.sketch_codec,
                  "Real mode: the codec per-worker sketches travel in both ways (the policy's "
                  "transform.statistics_codec): with --sketch-size the per-worker sources' "
                  "sketches pass through it each way (--sketch-steps); --target counts their "
                  "bytes in it")
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--sketch-steps", real.sketch_steps,
                  "Real mode: with --sketch-size, the per-worker sources' statistic is the EMA "
                  "(decay 0.95) of this many round trips of their sketch through --sketch-codec, "
                  "each rounded afresh")
      ->check(CLI::Range(1, 100000))
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--rotate-block", real.rotate_block,
                  "Real mode: follow every method (direct too) with a randomized Hadamard "
                  "rotation of each row in blocks of this many elements (a power of two "
                  "dividing d_in; 16: NVFP4's block), as every worker would apply it")
      ->check(CLI::Range(0, 1 << 20))
      ->needs(grads)
      ->capture_default_str();
  app->add_option("--target", real.target,
                  "Real mode: print the choice a basis owner would make under this fidelity "
                  "target (a spec among --specs): the fewest wire bytes whose error is at most "
                  "the target's direct error")
      ->needs(grads);
  app->add_option("--filter", real.filter,
                  "Real mode: measure only methods whose name contains every one of these "
                  "comma-separated substrings, e.g. family/both,/r64/ (direct is always measured)")
      ->delimiter(',')
      ->needs(grads);
  app->add_option("--threads", options->threads,
                  "Threads for the codec calls (default: hardware threads, " +
                      std::to_string(HardwareThreads()) + " here)")
      ->check(CLI::Range(1, 4096));
  app->add_flag("!--no-simd", options->use_simd, "Use the codec's scalar loops instead of AVX2");
  app->add_option("--json", options->json_path,
                  "Also write every number as JSON to FILE ('-' for stdout; the table then goes "
                  "to stderr)")
      ->type_name("FILE");
  return Command{app, [options] { return RunFidelityReport(*options); }};
}

absl::Status RunFidelityReport(const FidelityOptions& options) {
  if (options.real.grads.empty()) return Run(options);
  RealFidelityOptions real = options.real;
  real.specs = options.specs;
  real.threads = options.threads;
  real.use_simd = options.use_simd;
  real.json_path = options.json_path;
  return RunRealGradientFidelity(real);
}

}  // namespace gift::bench
