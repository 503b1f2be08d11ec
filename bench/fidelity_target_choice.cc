#include "bench/fidelity_target_choice.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "common/policy/statistics_tensor.h"
#include "common/transform/fidelity_target.h"
#include "common/transform/moment_sketch.h"

namespace gift::bench {
namespace {

uint64_t BasisBytes(const MethodResult& r, int64_t d_out, int64_t d_in) {
  if (!absl::StartsWith(r.method, "family/")) return 0;
  const uint64_t rank = static_cast<uint64_t>(r.rank);
  uint64_t elements = 0;
  if (r.sides == "both" || r.sides == "output") elements += std::min<uint64_t>(rank, d_out) * d_out;
  if (r.sides == "both" || r.sides == "input") elements += std::min<uint64_t>(rank, d_in) * d_in;
  return 4 * elements;
}

// The per-worker sketches of a per-worker source: MomentSketch's n k + n + 1
// values per sketched side in one statistics tensor, both ways in `spec`.
absl::StatusOr<uint64_t> StatisticsBytes(const MethodResult& r, const TargetChoiceOptions& o) {
  if (!absl::StrContains(r.source, "per-worker")) return 0;
  // A side's sketch has k columns, at most its dimension (TensorGeometry).
  auto side = [&](int64_t n) {
    return transform::MomentSketch::ContributionSize(n, std::min(o.sketch_size, n));
  };
  int64_t values = 0;
  // activations+ema-per-worker sketches the output side only.
  const bool input =
      !absl::StartsWith(r.source, "activations") && (r.sides == "both" || r.sides == "input");
  const bool output = r.sides == "both" || r.sides == "output";
  if (input) values += side(o.d_in);
  if (output) values += side(o.d_out);
  return policy::StatisticsWireBytes(o.statistics_codec, static_cast<uint64_t>(values));
}

}  // namespace

absl::StatusOr<nlohmann::json> PrintTargetChoice(const std::vector<MethodResult>& results,
                                                 const TargetChoiceOptions& options,
                                                 std::ostream& os) {
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec target_spec, codec::ParseCodecSpec(options.target));
  const std::string target = codec::ToString(target_spec);
  const uint64_t dims[] = {static_cast<uint64_t>(options.d_out),
                           static_cast<uint64_t>(options.d_in)};
  GIFT_ASSIGN_OR_RETURN(const uint64_t pull, codec::PayloadSizeFor(target_spec, dims));
  std::vector<transform::WireOption> wire;
  std::vector<const MethodResult*> of;
  const MethodResult* target_direct = nullptr;
  for (const MethodResult& r : results) {
    const bool family = absl::StartsWith(r.method, "family/");
    if (!family && r.method != "direct") continue;
    if (r.method == "direct" && r.spec == target) target_direct = &r;
    GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec spec, codec::ParseCodecSpec(r.spec));
    GIFT_ASSIGN_OR_RETURN(const uint64_t push, codec::PayloadSizeFor(spec, dims));
    GIFT_ASSIGN_OR_RETURN(const uint64_t statistics, StatisticsBytes(r, options));
    wire.push_back(
        {.error = std::isfinite(r.rel_l2_avg) ? r.rel_l2_avg : std::numeric_limits<double>::max(),
         .bytes_per_step = transform::WireBytesPerStep(
             push, pull, statistics, 1,
             BasisBytes(r, options.d_out, options.d_in), options.refresh_period)});
    of.push_back(&r);
  }
  if (target_direct == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target ", target, " was not measured: add it to --specs"));
  }
  const double target_error = target_direct->rel_l2_avg;
  GIFT_ASSIGN_OR_RETURN(
      const int chosen,
      transform::ChooseWireOption(wire, target_error, std::numeric_limits<double>::infinity()));
  double target_bytes = 0;
  for (size_t i = 0; i < of.size(); ++i) {
    if (of[i] == target_direct) target_bytes = wire[i].bytes_per_step;
  }
  os << absl::StrFormat(
      "\ntarget choice (selection.target = %s, direct error %.4e, %.0f bytes per step and "
      "worker with the pull in %s):\n",
      target, target_error, target_bytes, target);
  auto line = [&](absl::string_view what, size_t i) {
    os << absl::StrFormat("  %-9s %-52s %-14s err %.4e (%.3fx target)  bytes %.0f (%.3fx)\n", what,
                          of[i]->method, of[i]->spec, wire[i].error, wire[i].error / target_error,
                          wire[i].bytes_per_step, wire[i].bytes_per_step / target_bytes);
  };
  nlohmann::json out = {
      {"target", target}, {"target_error", target_error}, {"target_bytes_per_step", target_bytes}};
  if (chosen >= 0) {
    line("chosen", static_cast<size_t>(chosen));
    out["chosen"] = {{"method", of[chosen]->method},
                     {"spec", of[chosen]->spec},
                     {"error", wire[chosen].error},
                     {"bytes_per_step", wire[chosen].bytes_per_step}};
  }
  // Per spec: its cheapest option within the target, or its best error.
  std::vector<std::string> specs;
  for (const MethodResult* r : of) {
    if (std::find(specs.begin(), specs.end(), r->spec) == specs.end()) specs.push_back(r->spec);
  }
  for (const std::string& spec : specs) {
    int best = -1, lowest = -1;
    for (size_t i = 0; i < of.size(); ++i) {
      if (of[i]->spec != spec) continue;
      if (lowest < 0 || wire[i].error < wire[lowest].error) lowest = static_cast<int>(i);
      if (wire[i].error <= target_error &&
          (best < 0 || wire[i].bytes_per_step < wire[best].bytes_per_step)) {
        best = static_cast<int>(i);
      }
    }
    line(best >= 0 ? "within" : "lowest", static_cast<size_t>(best >= 0 ? best : lowest));
  }
  return out;
}

}  // namespace gift::bench
