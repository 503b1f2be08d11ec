#include "bench/fidelity_methods.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bench/bench_util.h"
#include "bench/fidelity_target_choice.h"
#include "bench/npy_file.h"
#include "common/base/status_macros.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/reduce.h"
#include "common/policy/statistics_tensor.h"
#include "common/transform/dense_whitening_transform.h"
#include "common/transform/gradient_transform.h"
#include "common/transform/hadamard_transform.h"
#include "common/transform/identity_transform.h"
#include "common/transform/moment_sketch.h"
#include "common/transform/rotated_transform.h"
#include "common/transform/second_moment_ema.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "common/transform/tensor_basis_transform.h"

namespace gift::bench {
namespace {

using transform::GradientTransform;
using transform::ResidualModel;
using transform::SideBasis;
using transform::Sides;

// A statistic matrix of one side and the name it is reported under.
struct SideStat {
  const Eigen::MatrixXd* matrix = nullptr;
  std::string name;
};

// The input- and output-side statistics of one source, each named by where
// it comes from; a null matrix when the source lacks that side.
struct Source {
  SideStat in;
  SideStat out;
  bool allow_output_only = true;
  bool both_sides_only = false;  // its one-sided methods are another source's
};

// What a method is before it is built.
struct MethodDef {
  MethodResult labels;  // method, sides, source, residual, power, rank
  enum class Kind { kDirect, kHadamard, kDense, kFamily } kind = Kind::kDirect;
  Sides sides = Sides::kBoth;
  SideStat in, out;  // the statistics each enabled side is built from
  ResidualModel residual = ResidualModel::kIsotropic;
  int64_t rank_in = 0, rank_out = 0;  // clipped to the dimension
};

// Key of a cached SideBasis: the statistic, its rank, its residual model.
using SideKey = std::tuple<const Eigen::MatrixXd*, int64_t, ResidualModel>;

// The EMA decay folding the wire's round trips: the policy's default
// transform.ema_decay.
constexpr double kWireEmaDecay = transform::SecondMomentEma::kDefaultDecay;

// `values` as they arrive after a trip through `spec` each way, laid out as
// a statistics tensor (rows of policy::kStatisticsColumns, zero padded):
// pushed by `workers` workers (each encodes them with the spec's rounding,
// keyed by `key` with its rank), averaged and pulled as a server does
// (codec::ReduceEncoded, the pull keyed with rank `workers`), and decoded.
absl::Status WireRoundTrip(const codec::CodecSpec& spec, codec::RngKey key, int workers,
                           std::vector<float>& values) {
  const uint64_t cols = static_cast<uint64_t>(policy::kStatisticsColumns);
  const uint64_t rows = policy::StatisticsRows(values.size());
  std::vector<float> padded(rows * cols, 0.0f), sum(rows * cols);
  absl::c_copy(values, padded.begin());
  std::vector<codec::EncodedTensor> pushed;
  for (int w = 0; w < workers; ++w) {
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor e, codec::EncodedTensor::Create(spec, rows, cols));
    key.rank = static_cast<uint32_t>(w);
    GIFT_RETURN_IF_ERROR(codec::Encode(padded.data(), e.mutable_view(), key));
    pushed.push_back(std::move(e));
  }
  std::vector<codec::EncodedView> views;
  for (const codec::EncodedTensor& e : pushed) views.push_back(e.view());
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor pulled, codec::EncodedTensor::Create(spec, rows, cols));
  key.rank = static_cast<uint32_t>(workers);
  GIFT_RETURN_IF_ERROR(codec::ReduceEncoded(views, sum.data(), 1.0f / static_cast<float>(workers),
                                            pulled.mutable_view(), key));
  GIFT_RETURN_IF_ERROR(codec::Decode(pulled.view(), padded.data()));
  std::copy_n(padded.begin(), values.size(), values.begin());
  return absl::OkStatus();
}

// The side basis an owner with sketched statistics builds from `m`:
// Nystrom eigenpairs of its k-column sketch (seeded by the dimension, as an
// owner seeds by tensor), exact diagonal and trace. With a `wire` codec (a
// per-worker statistic's, which travels): the EMA of `wire_steps` round
// trips of that sketch, diagonal and trace through `workers` workers
// (MethodGridOptions::sketch_codec).
absl::StatusOr<SideBasis> SketchedSideBasis(const Eigen::MatrixXd& m, int64_t rank,
                                            int64_t sketch_size, ResidualModel residual,
                                            const std::optional<codec::CodecSpec>& wire,
                                            int64_t wire_steps, int workers) {
  const int64_t n = m.rows();
  const int64_t k = std::min(sketch_size, n);
  GIFT_ASSIGN_OR_RETURN(const transform::MomentSketch sketch,
                        transform::MomentSketch::Create(n, k, static_cast<uint64_t>(n)));
  std::vector<float> contribution(static_cast<size_t>(sketch.contribution_size()));
  GIFT_RETURN_IF_ERROR(sketch.MatrixContribution(m, contribution.data()));
  GIFT_ASSIGN_OR_RETURN(
      transform::SketchedMomentEma ema,
      transform::SketchedMomentEma::Create(
          std::make_shared<const transform::MomentSketch>(sketch), kWireEmaDecay,
          wire.has_value() ? policy::WireNoise(*wire, kWireEmaDecay) : 0.0));
  if (!wire.has_value()) {
    GIFT_RETURN_IF_ERROR(ema.Update(contribution));
  } else {
    std::vector<float> arrived;
    for (int64_t step = 0; step < wire_steps; ++step) {
      arrived = contribution;
      GIFT_RETURN_IF_ERROR(WireRoundTrip(
          *wire, {.tensor = static_cast<uint64_t>(n), .step = static_cast<uint64_t>(step)},
          workers, arrived));
      GIFT_RETURN_IF_ERROR(ema.Update(arrived));
    }
  }
  GIFT_ASSIGN_OR_RETURN(const transform::LowRankEigenpairs eig,
                        ema.TopEigenpairs(std::min(rank == 0 ? n : rank, k)));
  return SideBasis::FromEigenpairs(eig, ema.diagonal(), n, {.residual = residual});
}

absl::string_view SidesName(Sides s) {
  switch (s) {
    case Sides::kInput:
      return "input";
    case Sides::kOutput:
      return "output";
    case Sides::kBoth:
      return "both";
  }
  return "?";
}

std::string ScalingName(const codec::CodecSpec& spec) {
  switch (spec.scaling) {
    case codec::Scaling::kNone:
      return "none";
    case codec::Scaling::kPerTensor:
      return "tensor";
    case codec::Scaling::kPerBlockFp32:
      return absl::StrCat("block", spec.block_size);
    case codec::Scaling::kPerBlockE8M0:
      return absl::StrCat("mx", spec.block_size);
    case codec::Scaling::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

absl::Status CheckStatistic(const std::optional<Eigen::MatrixXd>& m, int64_t n,
                            absl::string_view what) {
  if (!m.has_value()) return absl::OkStatus();
  if (m->rows() != n || m->cols() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", m->rows(), "x", m->cols(), " but must be ", n, "x", n));
  }
  if (!m->allFinite()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has non-finite values"));
  }
  return absl::OkStatus();
}

// Relative L2 error ||a - b|| / ||b|| and the cosine between a and b.
struct Agreement {
  double rel_l2 = 0;
  double cos = 0;
};

Agreement Compare(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, aa = 0, bb = 0, ab = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double x = a[i], y = b[i];
    diff += (x - y) * (x - y);
    aa += x * x;
    bb += y * y;
    ab += x * y;
  }
  Agreement r;
  r.rel_l2 = bb > 0 ? std::sqrt(diff / bb) : std::sqrt(diff);
  r.cos = aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
  return r;
}

int64_t ClipRank(int64_t rank, int64_t n) { return rank == 0 ? n : std::min(rank, n); }

// A result with the labels of a method filled in.
MethodResult Labels(std::string method, absl::string_view sides, absl::string_view source,
                    absl::string_view residual, double power, int64_t rank) {
  MethodResult r;
  r.method = std::move(method);
  r.sides = std::string(sides);
  r.source = std::string(source);
  r.residual = std::string(residual);
  r.power = power;
  r.rank = rank;
  return r;
}

std::string RankName(int64_t rank) { return rank == 0 ? "rfull" : absl::StrCat("r", rank); }

// The method list, in report order, after the filter.
std::vector<MethodDef> EnumerateMethods(const WorkerGradients& g,
                                        const std::vector<Source>& sources,
                                        const SideStat& dense_stat,
                                        const MethodGridOptions& options) {
  std::vector<MethodDef> defs;
  auto keep = [&](const std::string& name) {
    return std::all_of(options.filter.begin(), options.filter.end(),
                       [&](const std::string& f) { return absl::StrContains(name, f); });
  };
  MethodDef direct;
  direct.labels = Labels("direct", "none", "none", "none", 0.0, 0);
  defs.push_back(direct);

  MethodDef hadamard = direct;
  hadamard.kind = MethodDef::Kind::kHadamard;
  hadamard.labels.method = "hadamard";
  hadamard.labels.sides = "input";
  if (keep(hadamard.labels.method)) defs.push_back(hadamard);

  // The largest requested rank (0, full rank, is the largest).
  const bool any_full = absl::c_linear_search(options.ranks, int64_t{0});
  const int64_t max_rank =
      any_full ? 0 : *std::max_element(options.ranks.begin(), options.ranks.end());
  MethodDef dense = direct;
  dense.kind = MethodDef::Kind::kDense;
  dense.sides = Sides::kInput;
  dense.in = dense_stat;
  dense.rank_in = ClipRank(max_rank, g.d_in);
  dense.labels = Labels(absl::StrCat("dense/", dense_stat.name, "/", RankName(max_rank)), "input",
                        dense_stat.name, "diagonal", 0.5, max_rank);
  if (keep(dense.labels.method)) defs.push_back(dense);

  for (Sides sides : {Sides::kBoth, Sides::kInput, Sides::kOutput}) {
    const bool need_in = sides != Sides::kOutput, need_out = sides != Sides::kInput;
    for (double power : options.powers) {
      for (const Source& src : sources) {
        if ((need_in && src.in.matrix == nullptr) || (need_out && src.out.matrix == nullptr) ||
            (sides == Sides::kOutput && !src.allow_output_only) ||
            (sides != Sides::kBoth && src.both_sides_only)) {
          continue;
        }
        const std::string source_name = sides == Sides::kBoth && src.in.name != src.out.name
                                            ? absl::StrCat(src.in.name, "+", src.out.name)
                                            : (need_in ? src.in.name : src.out.name);
        for (int64_t rank : options.ranks) {
          for (ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
            MethodDef d;
            d.kind = MethodDef::Kind::kFamily;
            d.sides = sides;
            d.residual = residual;
            if (need_in) d.in = src.in;
            if (need_out) d.out = src.out;
            d.rank_in = ClipRank(rank, g.d_in);
            d.rank_out = ClipRank(rank, g.d_out);
            const bool iso = residual == ResidualModel::kIsotropic;
            d.labels =
                Labels(absl::StrCat("family/", SidesName(sides), "/p", power, "/", source_name, "/",
                                    RankName(rank), "/", iso ? "iso" : "diag"),
                       SidesName(sides), source_name, iso ? "isotropic" : "diagonal", power, rank);
            if (keep(d.labels.method)) defs.push_back(std::move(d));
          }
        }
      }
    }
  }
  return defs;
}

// Measures one built transform with every spec.
absl::Status MeasureTransform(const GradientTransform& t, const WorkerGradients& g,
                              const std::vector<double>& exact_avg,
                              const MethodGridOptions& options, const MethodDef& def,
                              std::vector<MethodResult>* out) {
  const int64_t P = static_cast<int64_t>(g.workers.size());
  const size_t n = static_cast<size_t>(g.d_out * g.d_in);
  const codec::CodecOptions copts{.pool = nullptr, .use_simd = options.use_simd};
  std::vector<std::vector<float>> x(P, std::vector<float>(n));
  for (int64_t w = 0; w < P; ++w) {
    GIFT_RETURN_IF_ERROR(t.Forward(g.workers[w].data(), g.d_out, g.d_in, x[w].data()));
  }
  const std::vector<double> g0(g.workers[0].begin(), g.workers[0].end());
  std::vector<float> decoded(n), restored(n);
  for (const codec::CodecSpec& spec : options.specs) {
    MethodResult r = def.labels;
    r.transform = t.name();
    r.spec = codec::ToString(spec);
    r.format = std::string(codec::FormatName(spec.format));
    r.scaling = ScalingName(spec);
    const double fmax = codec::FormatMax(spec.format);

    std::vector<codec::EncodedTensor> encoded;
    std::vector<codec::EncodedView> views;
    encoded.reserve(P);
    uint64_t nonzero = 0, underflow = 0, saturated = 0;
    for (int64_t w = 0; w < P; ++w) {
      GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor e,
                            codec::EncodedTensor::Create(spec, g.d_out, g.d_in));
      GIFT_RETURN_IF_ERROR(codec::Encode(
          x[w].data(), e.mutable_view(),
          codec::RngKey{
              .tensor = options.tensor_id, .step = options.step, .rank = static_cast<uint32_t>(w)},
          copts));
      GIFT_RETURN_IF_ERROR(codec::Decode(e.view(), decoded.data(), copts));
      for (size_t i = 0; i < n; ++i) {
        const float xi = std::fabs(x[w][i]), di = std::fabs(decoded[i]);
        if (xi != 0) {
          ++nonzero;
          if (di == 0) ++underflow;
        }
        // Only an element that lost magnitude can have been clipped.
        if (xi > di) {
          const uint64_t row = i / g.d_in, col = i % g.d_in;
          const double s = codec::EffectiveScale(e.view(), row, col);
          const double top = fmax * s;
          if (xi > top + codec::ElementErrorBound(spec.format, spec.rounding, s, top)) {
            ++saturated;
          }
        }
      }
      if (w == 0) {
        GIFT_RETURN_IF_ERROR(t.Inverse(decoded.data(), g.d_out, g.d_in, restored.data()));
        const Agreement a = Compare(restored, g0);
        r.rel_l2_single = a.rel_l2;
        r.cos_single = a.cos;
      }
      encoded.push_back(std::move(e));
    }
    for (const codec::EncodedTensor& e : encoded) views.push_back(e.view());
    r.underflow_frac = nonzero > 0 ? static_cast<double>(underflow) / nonzero : 0.0;
    r.saturation_frac = static_cast<double>(saturated) / static_cast<double>(n * P);

    GIFT_RETURN_IF_ERROR(codec::ReduceEncoded(views, decoded.data(), 1.0f / static_cast<float>(P),
                                              codec::MutableEncodedView{}, {}, copts));
    GIFT_RETURN_IF_ERROR(t.Inverse(decoded.data(), g.d_out, g.d_in, restored.data()));
    const Agreement a = Compare(restored, exact_avg);
    r.rel_l2_avg = a.rel_l2;
    r.cos_avg = a.cos;
    out->push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<MethodResult>> MeasureMethodGrid(const WorkerGradients& grads,
                                                            const GridStatistics& stats,
                                                            const MethodGridOptions& options) {
  const int64_t m = grads.d_out, n = grads.d_in;
  if (m < 1 || n < 1 || grads.workers.empty()) {
    return absl::InvalidArgumentError("need at least one worker gradient of a positive shape");
  }
  for (size_t w = 0; w < grads.workers.size(); ++w) {
    if (grads.workers[w].size() != static_cast<size_t>(m * n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker ", w, " has ", grads.workers[w].size(), " values, not ", m, "x", n));
    }
  }
  if (options.specs.empty()) return absl::InvalidArgumentError("no codec spec to measure");
  for (const codec::CodecSpec& spec : options.specs) GIFT_RETURN_IF_ERROR(codec::Validate(spec));
  if (options.ranks.empty() || options.powers.empty()) {
    return absl::InvalidArgumentError("need at least one rank and one power");
  }
  for (int64_t r : options.ranks) {
    if (r < 0) return absl::InvalidArgumentError(absl::StrCat("rank ", r, " is negative"));
  }
  if (options.rotate_block < 0 ||
      (options.rotate_block > 0 && (n % options.rotate_block != 0 ||
                                    (options.rotate_block & (options.rotate_block - 1)) != 0))) {
    return absl::InvalidArgumentError(absl::StrCat("rotation block ", options.rotate_block,
                                                   " is not a power of two dividing d_in ", n));
  }
  if (options.sketch_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch steps ", options.sketch_steps, " is not positive"));
  }
  if (options.sketch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch size ", options.sketch_size, " is negative"));
  }
  for (double p : options.powers) {
    if (!(p > 0) || !std::isfinite(p)) {
      return absl::InvalidArgumentError(absl::StrCat("power ", p, " is not a finite p > 0"));
    }
  }
  GIFT_RETURN_IF_ERROR(CheckStatistic(stats.factor, n, "the activation factor"));
  GIFT_RETURN_IF_ERROR(CheckStatistic(stats.gram_in, n, "gram-in"));
  GIFT_RETURN_IF_ERROR(CheckStatistic(stats.gram_out, m, "gram-out"));
  GIFT_RETURN_IF_ERROR(CheckStatistic(stats.pw_gram_in, n, "pw-gram-in"));
  GIFT_RETURN_IF_ERROR(CheckStatistic(stats.pw_gram_out, m, "pw-gram-out"));

  // This step's statistics and the exact average.
  const int64_t P = static_cast<int64_t>(grads.workers.size());
  Eigen::MatrixXd mean = Eigen::MatrixXd::Zero(m, n);
  Eigen::MatrixXd pw_in = Eigen::MatrixXd::Zero(n, n), pw_out = Eigen::MatrixXd::Zero(m, m);
  for (const std::vector<float>& w : grads.workers) {
    const Eigen::MatrixXd gw =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
            w.data(), m, n)
            .cast<double>();
    mean += gw;
    pw_in.noalias() += gw.transpose() * gw;
    pw_out.noalias() += gw * gw.transpose();
  }
  mean /= static_cast<double>(P);
  pw_in /= static_cast<double>(P * m);
  pw_out /= static_cast<double>(P * n);
  const Eigen::MatrixXd step_in = mean.transpose() * mean / static_cast<double>(m);
  const Eigen::MatrixXd step_out = mean * mean.transpose() / static_cast<double>(n);
  std::vector<double> exact_avg(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) exact_avg[i * n + j] = mean(i, j);
  }

  auto opt = [](const std::optional<Eigen::MatrixXd>& s) { return s ? &*s : nullptr; };
  std::vector<Source> sources = {
      {{&step_in, "step-mean"}, {&step_out, "step-mean"}},
      {{&pw_in, "step-per-worker"}, {&pw_out, "step-per-worker"}},
      {{opt(stats.gram_in), "ema-mean"}, {opt(stats.gram_out), "ema-mean"}},
      {{opt(stats.pw_gram_in), "ema-per-worker"}, {opt(stats.pw_gram_out), "ema-per-worker"}},
  };
  // The gradient statistic standing in where a source lacks a side:
  // ema-per-worker, else ema-mean, else step-per-worker (the later
  // assignments win; docs/design.md sections 3.2 and 4.1 on which source to prefer).
  SideStat fallback_out{&pw_out, "step-per-worker"}, fallback_in{&pw_in, "step-per-worker"};
  if (stats.gram_out) fallback_out = {&*stats.gram_out, "ema-mean"};
  if (stats.pw_gram_out) fallback_out = {&*stats.pw_gram_out, "ema-per-worker"};
  if (stats.gram_in) fallback_in = {&*stats.gram_in, "ema-mean"};
  if (stats.pw_gram_in) fallback_in = {&*stats.pw_gram_in, "ema-per-worker"};
  SideStat dense_stat = fallback_in;
  if (stats.factor) {
    // With the per-worker EMA as the fallback this is the product's
    // GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER ("activations+ema-per-worker").
    sources.push_back({{&*stats.factor, "activations"},
                       fallback_out,
                       /*allow_output_only=*/false});
    dense_stat = {&*stats.factor, "activations"};
    // The product's GEOMETRY_SOURCE_ACTIVATIONS: the output side from the
    // reduced gradient's EMA (when the fallback above is another statistic).
    if (stats.gram_out && fallback_out.matrix != &*stats.gram_out) {
      sources.push_back({{&*stats.factor, "activations"},
                         {&*stats.gram_out, "ema-mean"},
                         /*allow_output_only=*/false,
                         /*both_sides_only=*/true});
    }
  }
  const std::vector<MethodDef> defs = EnumerateMethods(grads, sources, dense_stat, options);

  // The side bases, each built once.
  std::map<SideKey, absl::StatusOr<SideBasis>> cache;
  for (const MethodDef& d : defs) {
    if (d.kind != MethodDef::Kind::kFamily) continue;
    if (d.in.matrix)
      cache.emplace(SideKey{d.in.matrix, d.rank_in, d.residual}, absl::UnknownError(""));
    if (d.out.matrix) {
      cache.emplace(SideKey{d.out.matrix, d.rank_out, d.residual}, absl::UnknownError(""));
    }
  }
  std::vector<std::pair<const SideKey, absl::StatusOr<SideBasis>>*> slots;
  for (auto& entry : cache) slots.push_back(&entry);
  // The per-worker statistics, which travel as sketches.
  const Eigen::MatrixXd* travelling[] = {&pw_in, &pw_out, opt(stats.pw_gram_in),
                                         opt(stats.pw_gram_out)};
  ParallelFor(options.pool, slots.size(), [&](size_t i) {
    const auto& [matrix, rank, residual] = slots[i]->first;
    const bool travels = absl::c_linear_search(travelling, matrix);
    slots[i]->second =
        options.sketch_size > 0
            ? SketchedSideBasis(*matrix, rank, options.sketch_size, residual,
                                travels ? options.sketch_codec : std::nullopt,
                                options.sketch_steps, static_cast<int>(P))
            : SideBasis::FromFactor(*matrix, rank, {.residual = residual});
  });

  std::vector<absl::Status> status(defs.size());
  std::vector<std::vector<MethodResult>> results(defs.size());
  ParallelFor(options.pool, defs.size(), [&](size_t i) {
    const MethodDef& d = defs[i];
    auto build = [&]() -> absl::StatusOr<std::unique_ptr<GradientTransform>> {
      switch (d.kind) {
        case MethodDef::Kind::kDirect: {
          GIFT_ASSIGN_OR_RETURN(auto t, transform::IdentityTransform::Create(m, n));
          return std::make_unique<transform::IdentityTransform>(std::move(t));
        }
        case MethodDef::Kind::kHadamard: {
          GIFT_ASSIGN_OR_RETURN(auto t,
                                transform::HadamardTransform::Create(m, n, {.block = n & -n}));
          return std::make_unique<transform::HadamardTransform>(std::move(t));
        }
        case MethodDef::Kind::kDense: {
          GIFT_ASSIGN_OR_RETURN(
              auto t, transform::DenseWhiteningTransform::Create(*d.in.matrix, d.rank_in, m));
          return std::make_unique<transform::DenseWhiteningTransform>(std::move(t));
        }
        case MethodDef::Kind::kFamily: {
          std::optional<SideBasis> in, out;
          if (d.in.matrix) {
            const absl::StatusOr<SideBasis>& b = cache.at({d.in.matrix, d.rank_in, d.residual});
            if (!b.ok()) return b.status();
            in = *b;
          }
          if (d.out.matrix) {
            const absl::StatusOr<SideBasis>& b = cache.at({d.out.matrix, d.rank_out, d.residual});
            if (!b.ok()) return b.status();
            out = *b;
          }
          GIFT_ASSIGN_OR_RETURN(
              transform::TensorBasis basis,
              transform::TensorBasis::Create({.tensor_id = options.tensor_id,
                                              .d_out = m,
                                              .d_in = n,
                                              .config = {d.sides, d.labels.power}},
                                             std::move(out), std::move(in)));
          return std::make_unique<transform::TensorBasisTransform>(std::move(basis));
        }
      }
      return absl::InternalError("unknown method kind");
    };
    // --rotate-block: the product's rotation after the method (the policy's
    // transform.rotation_block), seeded by the tensor id.
    absl::StatusOr<std::shared_ptr<const GradientTransform>> t = build();
    if (t.ok() && options.rotate_block > 0) {
      auto rotated = transform::RotatedTransform::Create(*std::move(t), options.rotate_block,
                                                         options.tensor_id);
      t = rotated.ok()
              ? absl::StatusOr<std::shared_ptr<const GradientTransform>>(*std::move(rotated))
              : rotated.status();
    }
    status[i] =
        t.ok() ? MeasureTransform(**t, grads, exact_avg, options, d, &results[i]) : t.status();
    if (options.rotate_block > 0) {
      for (MethodResult& r : results[i]) r.method += absl::StrCat("+rht", options.rotate_block);
    }
  });

  std::vector<MethodResult> all;
  for (size_t i = 0; i < defs.size(); ++i) {
    if (!status[i].ok()) {
      return absl::Status(status[i].code(),
                          absl::StrCat(defs[i].labels.method, ": ", status[i].message()));
    }
    for (MethodResult& r : results[i]) all.push_back(std::move(r));
  }
  // Direct comes first, one result per spec in spec order.
  const size_t num_specs = options.specs.size();
  for (size_t i = 0; i < all.size(); ++i) {
    const double direct = all[i % num_specs].rel_l2_avg;
    all[i].ratio_vs_direct = direct > 0 ? all[i].rel_l2_avg / direct : 0.0;
  }
  return all;
}

nlohmann::json MethodResultJson(const MethodResult& r) {
  // JSON has no infinities; a non-finite number is written as null.
  auto num = [](double v) -> nlohmann::json {
    return std::isfinite(v) ? nlohmann::json(v) : nullptr;
  };
  return {{"method", r.method},
          {"transform", r.transform},
          {"spec", r.spec},
          {"format", r.format},
          {"scaling", r.scaling},
          {"sides", r.sides},
          {"source", r.source},
          {"residual", r.residual},
          {"power", r.power},
          {"rank", r.rank},
          {"rel_l2_single", num(r.rel_l2_single)},
          {"cos_single", num(r.cos_single)},
          {"rel_l2_avg", num(r.rel_l2_avg)},
          {"cos_avg", num(r.cos_avg)},
          {"underflow_frac", r.underflow_frac},
          {"saturation_frac", r.saturation_frac},
          {"ratio_vs_direct", num(r.ratio_vs_direct)}};
}

const std::vector<std::string>& DefaultRealFidelitySpecs() {
  static const auto* specs =
      new std::vector<std::string>{"e5m2/tensor", "e4m3/block128", "nvfp4", "bf16"};
  return *specs;
}

namespace {

// The statistic at `path` (none for an empty path); it must be n x n.
absl::StatusOr<std::optional<Eigen::MatrixXd>> LoadStatistic(const std::string& path,
                                                             absl::string_view flag, int64_t n) {
  if (path.empty()) return std::optional<Eigen::MatrixXd>();
  GIFT_ASSIGN_OR_RETURN(NpyMatrix<double> s, ReadNpyDouble(path));
  if (s.rows != n || s.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat(path, " (", flag, ") is ", s.rows, "x", s.cols,
                                                   " but must be ", n, "x", n,
                                                   " for these gradients"));
  }
  return std::optional<Eigen::MatrixXd>(
      Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          s.values.data(), s.rows, s.cols));
}

void PrintRow(std::ostream& os, const MethodResult& r) {
  WriteLine(os, absl::StrFormat("%-52s %-14s %9.3e %8.5f %9.3e %8.5f %7.3f %9.2e %9.2e", r.method,
                                r.spec, r.rel_l2_single, r.cos_single, r.rel_l2_avg, r.cos_avg,
                                r.ratio_vs_direct, r.underflow_frac, r.saturation_frac));
}

}  // namespace

absl::Status RunRealGradientFidelity(const RealFidelityOptions& options) {
  if (options.grads.empty()) return absl::InvalidArgumentError("--grads names no file");
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(options.json_path));
  std::ostream& os = sinks.table();
  const std::vector<std::string>& spec_names =
      options.specs.empty() ? DefaultRealFidelitySpecs() : options.specs;

  MethodGridOptions grid;
  GIFT_ASSIGN_OR_RETURN(grid.specs, ParseSpecs(spec_names));
  grid.ranks = options.ranks;
  grid.powers = options.powers;
  grid.filter = options.filter;
  grid.sketch_size = options.sketch_size;
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec sketch_codec,
                        codec::ParseCodecSpec(options.sketch_codec));
  if (options.sketch_size > 0) grid.sketch_codec = sketch_codec;
  grid.sketch_steps = options.sketch_steps;
  grid.rotate_block = options.rotate_block;
  grid.use_simd = options.use_simd;

  WorkerGradients grads;
  for (const std::string& path : options.grads) {
    GIFT_ASSIGN_OR_RETURN(NpyMatrix<float> g, ReadNpyFloat(path));
    if (grads.workers.empty()) {
      grads.d_out = g.rows;
      grads.d_in = g.cols;
    } else if (g.rows != grads.d_out || g.cols != grads.d_in) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is ", g.rows, "x", g.cols, " but ",
                                                     options.grads[0], " is ", grads.d_out, "x",
                                                     grads.d_in, ": all --grads must match"));
    }
    grads.workers.push_back(std::move(g.values));
  }
  GridStatistics stats;
  const int64_t m = grads.d_out, n = grads.d_in;
  GIFT_ASSIGN_OR_RETURN(stats.factor, LoadStatistic(options.factor, "--factor", n));
  GIFT_ASSIGN_OR_RETURN(stats.gram_in, LoadStatistic(options.gram_in, "--gram-in", n));
  GIFT_ASSIGN_OR_RETURN(stats.gram_out, LoadStatistic(options.gram_out, "--gram-out", m));
  GIFT_ASSIGN_OR_RETURN(stats.pw_gram_in, LoadStatistic(options.pw_gram_in, "--pw-gram-in", n));
  GIFT_ASSIGN_OR_RETURN(stats.pw_gram_out, LoadStatistic(options.pw_gram_out, "--pw-gram-out", m));

  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads - 1);
  grid.pool = pool.get();

  os << absl::StrFormat(
      "gift-bench fidelity: %d worker gradients %dx%d (%s, ...); statistics:%s%s%s%s%s\n",
      grads.workers.size(), grads.d_out, grads.d_in, options.grads[0],
      stats.factor ? " factor" : "", stats.gram_in ? " gram-in" : "",
      stats.gram_out ? " gram-out" : "", stats.pw_gram_in ? " pw-gram-in" : "",
      stats.pw_gram_out ? " pw-gram-out" : "");
  os << "columns: err1/cos1 = worker 0 alone; avg err/cos = the average of the P decoded\n"
        "  contributions (codec::ReduceEncoded, post_scale 1/P, then the inverse) against the\n"
        "  exact average; ratio = avg err / direct's avg err with the same spec; uflow = nonzero\n"
        "  transformed elements decoded to 0; sat = elements clipped at the format's max\n";
  os.flush();
  GIFT_ASSIGN_OR_RETURN(std::vector<MethodResult> results, MeasureMethodGrid(grads, stats, grid));

  WriteLine(os, absl::StrFormat("%-52s %-14s %9s %8s %9s %8s %7s %9s %9s", "method", "spec", "err1",
                                "cos1", "avg err", "avg cos", "ratio", "uflow", "sat"));
  for (const MethodResult& r : results) PrintRow(os, r);

  // Per spec: the reference methods, the default family configuration from
  // every source, and the best family configuration.
  os << "\nsummary (default family: both sides, r=64, isotropic; ratio < 1 beats direct)\n";
  for (const std::string& spec_name : spec_names) {
    const std::string spec = codec::ToString(*codec::ParseCodecSpec(spec_name));
    const MethodResult* best = nullptr;
    os << "spec " << spec << ":\n";
    for (const MethodResult& r : results) {
      if (r.spec != spec) continue;
      const bool family = absl::StartsWith(r.method, "family/");
      const bool is_default = family && r.sides == "both" && r.rank == 64 &&
                              r.residual == "isotropic" && (r.power == 0.125 || r.power == 0.25);
      if (!family || is_default) PrintRow(os, r);
      if (family && (best == nullptr || r.rel_l2_avg < best->rel_l2_avg)) best = &r;
    }
    if (best != nullptr) {
      os << "  best:\n";
      PrintRow(os, *best);
    }
  }
  os.flush();

  nlohmann::json doc = nlohmann::json::array();
  for (const MethodResult& r : results) doc.push_back(MethodResultJson(r));
  if (!options.target.empty()) {
    TargetChoiceOptions choice_options{
        .target = options.target, .d_out = m, .d_in = n, .statistics_codec = sketch_codec};
    if (options.sketch_size > 0) choice_options.sketch_size = options.sketch_size;
    GIFT_ASSIGN_OR_RETURN(nlohmann::json choice, PrintTargetChoice(results, choice_options, os));
    os.flush();
    // The choice as the list's last element, marked as such.
    choice["target_choice"] = true;
    doc.push_back(std::move(choice));
  }
  return sinks.WriteJson(doc);
}

}  // namespace gift::bench
