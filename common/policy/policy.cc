#include "common/policy/policy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/statistics_tensor.h"
#include "google/protobuf/stubs/common.h"

namespace gift::policy {
namespace {

using gift::v1::Policy;

constexpr double kDefaultPowers[] = {0.125, 0.25};
constexpr uint32_t kDefaultRank = 64;
constexpr double kDefaultEmaDecay = 0.95;
constexpr uint32_t kDefaultCollectPeriod = 1;
constexpr uint32_t kDefaultMeasurePeriod = 4;
constexpr double kDefaultGiftBudget = 0.05;
constexpr double kDefaultDampingEps = 1e-3;
constexpr char kDefaultPushCodec[] = "e4m3/block128/rne";
constexpr char kDefaultPullCodec[] = "e4m3/block128/rne";
constexpr char kDefaultTargetCodec[] = "e4m3/block128/rne";
constexpr const char* kDefaultTargetCodecs[] = {"e4m3/block128/rne", "nvfp4", "nvfp4/mse"};
// Each candidate codec costs the owner one encode of the tensor per basis
// candidate at every refresh.
constexpr int kMaxTargetCodecs = 8;
constexpr char kNonTransformableCodec[] = "bf16";
constexpr char kDefaultStatisticsCodec[] = "bf16";
constexpr uint32_t kDefaultPeriodSteps = 10;
constexpr double kDefaultDriftThreshold = 0.2;
constexpr uint32_t kDefaultActivationLeadSteps = 4;
constexpr double kDefaultMargin = 0.1;
constexpr uint64_t kDefaultMinElements = 4096;
constexpr size_t kMaxGlobLength = 1024;

gift::v1::CodecSpec DefaultCodec(const char* text) {
  // The texts are constants that parse; a failure is a programming error
  // caught by the tests.
  auto spec = codec::ParseCodecSpec(text);
  return spec.ok() ? codec::ToProto(*spec) : gift::v1::CodecSpec();
}

absl::Status Invalid(absl::string_view field, const auto& value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, ": ", rule));
}

bool Finite(double x) { return std::isfinite(x); }

absl::Status ValidatePowers(absl::string_view field,
                            const google::protobuf::RepeatedField<double>& powers) {
  for (int i = 0; i < powers.size(); ++i) {
    if (!Finite(powers[i]) || powers[i] <= 0 || powers[i] > 1) {
      return Invalid(absl::StrCat(field, "[", i, "]"), powers[i], "must be in (0, 1]");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCodec(absl::string_view field, const gift::v1::CodecSpec& spec) {
  auto parsed = codec::FromProto(spec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = {", spec.ShortDebugString(), "}: ", parsed.status().message()));
  }
  return absl::OkStatus();
}

// A count in [1, max]: a rank (kMaxRank), a number of steps (a period, a
// stride, a lead: kMaxSteps), a sketch's columns (kMaxStatisticsColumns).
absl::Status ValidateCount(absl::string_view field, uint32_t value, uint32_t max) {
  if (value < 1 || value > max) {
    return Invalid(field, value, absl::StrCat("must be in [1, ", max, "]"));
  }
  return absl::OkStatus();
}

// transform.rotation_block: 0 (off) or a power of two in [2,
// kMaxRotationBlock].
absl::Status ValidateRotationBlock(absl::string_view field, uint32_t block) {
  if (block != 0 && !IsRotationBlock(block)) {
    return Invalid(
        field, block,
        absl::StrCat("must be 0 (off) or a power of two in [2, ", kMaxRotationBlock, "]"));
  }
  return absl::OkStatus();
}

// The largest dimension a basis of `tensor` under `settings` transforms (its
// rank is clamped to it).
int64_t RankBound(const TensorSettings& settings, absl::Span<const int64_t> shape) {
  switch (settings.transform.sides()) {
    case gift::v1::SIDES_INPUT:
      return shape[1];
    case gift::v1::SIDES_OUTPUT:
      return shape[0];
    default:
      return std::max(shape[0], shape[1]);
  }
}

}  // namespace

Policy WithDefaults(const Policy& policy) {
  Policy out = policy;
  gift::v1::TransformPolicy& t = *out.mutable_transform();
  if (t.sides() == gift::v1::SIDES_UNSPECIFIED) t.set_sides(gift::v1::SIDES_BOTH);
  if (t.powers().empty()) {
    for (double p : kDefaultPowers) t.add_powers(p);
  }
  if (t.source() == gift::v1::GEOMETRY_SOURCE_UNSPECIFIED) {
    t.set_source(gift::v1::GEOMETRY_SOURCE_GRADIENTS);
  }
  if (t.rank() == 0) t.set_rank(kDefaultRank);
  if (t.residual() == gift::v1::RESIDUAL_MODEL_UNSPECIFIED) {
    t.set_residual(gift::v1::RESIDUAL_MODEL_ISOTROPIC);
  }
  if (t.ema_decay() == 0) t.set_ema_decay(kDefaultEmaDecay);
  if (t.collect_period() == 0) t.set_collect_period(kDefaultCollectPeriod);
  if (t.direct_collect_stride() == 0) t.set_direct_collect_stride(1);
  if (t.damping_eps() == 0) t.set_damping_eps(kDefaultDampingEps);
  if (t.statistics() == gift::v1::STATISTICS_FORM_UNSPECIFIED) {
    t.set_statistics(gift::v1::STATISTICS_FORM_SKETCH);
  }
  if (t.push_codec().format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) {
    *t.mutable_push_codec() = DefaultCodec(kDefaultPushCodec);
  }
  if (t.pull_codec().format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) {
    *t.mutable_pull_codec() = DefaultCodec(kDefaultPullCodec);
  }
  if (t.statistics_codec().format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) {
    *t.mutable_statistics_codec() = t.pull_codec().format() == gift::v1::ELEMENT_FORMAT_F32
                                        ? t.pull_codec()
                                        : DefaultCodec(kDefaultStatisticsCodec);
  }
  if (t.statistics_columns() == 0) t.set_statistics_columns(kDefaultStatisticsColumns);
  gift::v1::RefreshPolicy& r = *out.mutable_refresh();
  if (r.period_steps() == 0) r.set_period_steps(kDefaultPeriodSteps);
  if (!r.has_drift_threshold()) r.set_drift_threshold(kDefaultDriftThreshold);
  if (r.activation_lead_steps() == 0) r.set_activation_lead_steps(kDefaultActivationLeadSteps);
  if (r.measure_period() == 0) r.set_measure_period(kDefaultMeasurePeriod);
  gift::v1::SelectionPolicy& s = *out.mutable_selection();
  if (s.mode() == gift::v1::SELECTION_MODE_UNSPECIFIED)
    s.set_mode(gift::v1::SELECTION_MODE_MEASURED);
  if (s.margin() == 0) s.set_margin(kDefaultMargin);
  if (s.min_elements() == 0) s.set_min_elements(kDefaultMinElements);
  if (!s.has_gift_budget()) s.set_gift_budget(kDefaultGiftBudget);
  if (!s.target_off()) {
    if (s.target().format() == gift::v1::ELEMENT_FORMAT_UNSPECIFIED) {
      *s.mutable_target() = DefaultCodec(kDefaultTargetCodec);
    }
    if (s.target_codecs().empty()) {
      for (const char* text : kDefaultTargetCodecs) *s.add_target_codecs() = DefaultCodec(text);
    }
  }
  if (out.hierarchy() == gift::v1::HIERARCHY_UNSPECIFIED) {
    out.set_hierarchy(gift::v1::HIERARCHY_NONE);
  }
  if (out.on_member_loss() == gift::v1::ON_MEMBER_LOSS_UNSPECIFIED) {
    out.set_on_member_loss(gift::v1::ON_MEMBER_LOSS_CONTINUE);
  }
  return out;
}

absl::Status Validate(const Policy& policy) {
  const gift::v1::TransformPolicy& t = policy.transform();
  if (t.sides() == gift::v1::SIDES_UNSPECIFIED || !gift::v1::Sides_IsValid(t.sides())) {
    return Invalid("transform.sides", t.sides(), "must be INPUT, OUTPUT or BOTH");
  }
  if (t.powers().empty()) return Invalid("transform.powers", "[]", "needs at least one power");
  GIFT_RETURN_IF_ERROR(ValidatePowers("transform.powers", t.powers()));
  if (t.source() == gift::v1::GEOMETRY_SOURCE_UNSPECIFIED ||
      !gift::v1::GeometrySource_IsValid(t.source())) {
    return Invalid("transform.source", t.source(), "unknown geometry source");
  }
  GIFT_RETURN_IF_ERROR(ValidateCount("transform.rank", t.rank(), kMaxRank));
  if (t.residual() == gift::v1::RESIDUAL_MODEL_UNSPECIFIED ||
      !gift::v1::ResidualModel_IsValid(t.residual())) {
    return Invalid("transform.residual", t.residual(), "unknown residual model");
  }
  if (!Finite(t.ema_decay()) || t.ema_decay() < 0 || t.ema_decay() >= 1) {
    return Invalid("transform.ema_decay", t.ema_decay(), "must be in [0, 1)");
  }
  GIFT_RETURN_IF_ERROR(ValidateCount("transform.collect_period", t.collect_period(), kMaxSteps));
  GIFT_RETURN_IF_ERROR(
      ValidateCount("transform.direct_collect_stride", t.direct_collect_stride(), kMaxSteps));
  if (!Finite(t.damping_eps()) || t.damping_eps() <= 0) {
    return Invalid("transform.damping_eps", t.damping_eps(), "must be finite and > 0");
  }
  if (t.statistics() == gift::v1::STATISTICS_FORM_UNSPECIFIED ||
      !gift::v1::StatisticsForm_IsValid(t.statistics())) {
    return Invalid("transform.statistics", t.statistics(), "must be SKETCH or EXACT");
  }
  GIFT_RETURN_IF_ERROR(ValidateCodec("transform.push_codec", t.push_codec()));
  GIFT_RETURN_IF_ERROR(ValidateCodec("transform.pull_codec", t.pull_codec()));
  GIFT_RETURN_IF_ERROR(ValidateCodec("transform.statistics_codec", t.statistics_codec()));
  GIFT_RETURN_IF_ERROR(ValidateRotationBlock("transform.rotation_block", t.rotation_block()));
  GIFT_RETURN_IF_ERROR(
      ValidateCount("transform.statistics_columns", t.statistics_columns(), kMaxStatisticsColumns));

  const gift::v1::RefreshPolicy& r = policy.refresh();
  GIFT_RETURN_IF_ERROR(ValidateCount("refresh.period_steps", r.period_steps(), kMaxSteps));
  if (!Finite(r.drift_threshold()) || r.drift_threshold() < 0) {
    return Invalid("refresh.drift_threshold", r.drift_threshold(), "must be finite and >= 0");
  }
  GIFT_RETURN_IF_ERROR(
      ValidateCount("refresh.activation_lead_steps", r.activation_lead_steps(), kMaxSteps));

  GIFT_RETURN_IF_ERROR(ValidateCount("refresh.measure_period", r.measure_period(), kMaxSteps));

  const gift::v1::SelectionPolicy& s = policy.selection();
  if (s.mode() == gift::v1::SELECTION_MODE_UNSPECIFIED ||
      !gift::v1::SelectionMode_IsValid(s.mode())) {
    return Invalid("selection.mode", s.mode(), "must be MEASURED or LIST");
  }
  for (int i = 0; i < s.include_size(); ++i) {
    GIFT_RETURN_IF_ERROR(ValidateGlob(absl::StrCat("selection.include[", i, "]"), s.include(i)));
  }
  for (int i = 0; i < s.exclude_size(); ++i) {
    GIFT_RETURN_IF_ERROR(ValidateGlob(absl::StrCat("selection.exclude[", i, "]"), s.exclude(i)));
  }
  if (!Finite(s.margin()) || s.margin() < 0 || s.margin() >= 1) {
    return Invalid("selection.margin", s.margin(), "must be in [0, 1)");
  }
  if (!Finite(s.gift_budget()) || s.gift_budget() < 0 || s.gift_budget() > kMaxGiftBudget) {
    return Invalid("selection.gift_budget", s.gift_budget(),
                   absl::StrCat("must be in [0, ", kMaxGiftBudget, "] (0: off)"));
  }
  if (!s.target_off()) {
    GIFT_RETURN_IF_ERROR(ValidateCodec("selection.target", s.target()));
    if (s.target_codecs_size() > kMaxTargetCodecs) {
      return Invalid("selection.target_codecs", s.target_codecs_size(),
                     absl::StrCat("at most ", kMaxTargetCodecs, " codecs"));
    }
    for (int i = 0; i < s.target_codecs_size(); ++i) {
      GIFT_RETURN_IF_ERROR(
          ValidateCodec(absl::StrCat("selection.target_codecs[", i, "]"), s.target_codecs(i)));
    }
  }

  for (int i = 0; i < policy.overrides_size(); ++i) {
    const gift::v1::TensorOverride& o = policy.overrides(i);
    const std::string prefix = absl::StrCat("overrides[", i, "].");
    GIFT_RETURN_IF_ERROR(ValidateGlob(absl::StrCat(prefix, "glob"), o.glob()));
    if (o.has_sides() &&
        (o.sides() == gift::v1::SIDES_UNSPECIFIED || !gift::v1::Sides_IsValid(o.sides()))) {
      return Invalid(absl::StrCat(prefix, "sides"), o.sides(), "must be INPUT, OUTPUT or BOTH");
    }
    GIFT_RETURN_IF_ERROR(ValidatePowers(absl::StrCat(prefix, "powers"), o.powers()));
    if (o.has_source() && (o.source() == gift::v1::GEOMETRY_SOURCE_UNSPECIFIED ||
                           !gift::v1::GeometrySource_IsValid(o.source()))) {
      return Invalid(absl::StrCat(prefix, "source"), o.source(), "unknown geometry source");
    }
    if (o.has_rank())
      GIFT_RETURN_IF_ERROR(ValidateCount(absl::StrCat(prefix, "rank"), o.rank(), kMaxRank));
    if (o.has_residual() && (o.residual() == gift::v1::RESIDUAL_MODEL_UNSPECIFIED ||
                             !gift::v1::ResidualModel_IsValid(o.residual()))) {
      return Invalid(absl::StrCat(prefix, "residual"), o.residual(), "unknown residual model");
    }
    if (o.has_period_steps()) {
      GIFT_RETURN_IF_ERROR(
          ValidateCount(absl::StrCat(prefix, "period_steps"), o.period_steps(), kMaxSteps));
    }
    if (o.has_push_codec()) {
      GIFT_RETURN_IF_ERROR(ValidateCodec(absl::StrCat(prefix, "push_codec"), o.push_codec()));
    }
    if (o.has_pull_codec()) {
      GIFT_RETURN_IF_ERROR(ValidateCodec(absl::StrCat(prefix, "pull_codec"), o.pull_codec()));
    }
    if (o.has_rotation_block()) {
      GIFT_RETURN_IF_ERROR(
          ValidateRotationBlock(absl::StrCat(prefix, "rotation_block"), o.rotation_block()));
    }
    if (o.has_statistics_columns()) {
      GIFT_RETURN_IF_ERROR(ValidateCount(absl::StrCat(prefix, "statistics_columns"),
                                         o.statistics_columns(), kMaxStatisticsColumns));
    }
  }
  if (!gift::v1::Hierarchy_IsValid(policy.hierarchy())) {
    return Invalid("hierarchy", policy.hierarchy(), "must be NONE or NODE");
  }
  if (!gift::v1::OnMemberLoss_IsValid(policy.on_member_loss())) {
    return Invalid("on_member_loss", policy.on_member_loss(), "must be CONTINUE or FAIL");
  }
  if (policy.hierarchy() == gift::v1::HIERARCHY_NODE) {
    // A node's sum is encoded by its leader without a residual.
    if (t.error_feedback()) {
      return Invalid("transform.error_feedback", "true",
                     "error feedback is not supported with hierarchy NODE");
    }
    for (int i = 0; i < policy.overrides_size(); ++i) {
      if (policy.overrides(i).error_feedback()) {
        return Invalid(absl::StrCat("overrides[", i, "].error_feedback"), "true",
                       "error feedback is not supported with hierarchy NODE");
      }
    }
  }
  return absl::OkStatus();
}

bool GlobMatch(absl::string_view glob, absl::string_view name) {
  // Greedy matching with backtracking to the last '*' only: correct for
  // globs made of '*', '?' and literals.
  size_t g = 0, n = 0;
  size_t star = absl::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (g < glob.size() && (glob[g] == '?' || glob[g] == name[n])) {
      ++g;
      ++n;
    } else if (g < glob.size() && glob[g] == '*') {
      star = g++;
      star_n = n;
    } else if (star != absl::string_view::npos) {
      g = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

absl::StatusOr<std::optional<double>> ParseGiftBudget(absl::string_view text) {
  if (text == "auto") return std::nullopt;
  if (text == "off") return 0.0;
  double fraction = 0.0;
  if (!absl::SimpleAtod(text, &fraction) || !Finite(fraction) || fraction < 0.0 ||
      fraction > kMaxGiftBudget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not auto, off or a fraction in [0, ", kMaxGiftBudget, "] (0.05: 5 %)"));
  }
  return fraction;
}

absl::Status ValidateGlob(absl::string_view field, const std::string& glob) {
  if (glob.empty()) return Invalid(field, "\"\"", "a glob must not be empty");
  if (glob.size() > kMaxGlobLength) {
    return Invalid(field, absl::StrCat("<", glob.size(), " characters>"),
                   absl::StrCat("a glob is at most ", kMaxGlobLength, " characters"));
  }
  // A proto3 string field: protobuf refuses to parse invalid UTF-8, so such
  // a glob would fail on the wire instead of here (protobuf's own check).
  if (!google::protobuf::internal::IsStructurallyValidUTF8(glob.data(),
                                                           static_cast<int>(glob.size()))) {
    return Invalid(field, absl::CEscape(glob), "a glob must be valid UTF-8");
  }
  for (char c : glob) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Invalid(field, absl::CEscape(glob), "a glob must not contain control characters");
    }
    // Not shell glob syntax here: '[' would match itself, silently nothing.
    if (c == '[' || c == ']' || c == '\\') {
      return Invalid(field, absl::CEscape(glob),
                     "a glob takes '*' (any run of characters) and '?' (one character); "
                     "'[', ']' and '\\' are not supported");
    }
  }
  return absl::OkStatus();
}

bool IsTransformable(absl::Span<const int64_t> shape) {
  return shape.size() == 2 && shape[0] >= 2 && shape[1] >= 2;
}

TensorSettings ResolveTensorSettings(const Policy& policy, absl::string_view name,
                                     absl::Span<const int64_t> shape) {
  TensorSettings out;
  out.transform = policy.transform();
  out.period_steps = policy.refresh().period_steps();
  std::optional<bool> enabled;
  // Per-worker sketches: the statistics codec both ways, whatever the
  // overrides say (they are about gradients); being 3-D they go direct.
  const bool statistics = IsStatisticsTensorName(name);
  if (statistics) {
    *out.transform.mutable_push_codec() = out.transform.statistics_codec();
    *out.transform.mutable_pull_codec() = out.transform.statistics_codec();
  } else if (!IsTransformable(shape)) {
    // Norm gains, biases, scalars: few bytes, and an FP8 block scale cannot
    // separate their entries' magnitudes; bf16 unless fp32 was asked for.
    static const gift::v1::CodecSpec bf16 = DefaultCodec(kNonTransformableCodec);
    if (out.transform.push_codec().format() != gift::v1::ELEMENT_FORMAT_F32) {
      *out.transform.mutable_push_codec() = bf16;
    }
    if (out.transform.pull_codec().format() != gift::v1::ELEMENT_FORMAT_F32) {
      *out.transform.mutable_pull_codec() = bf16;
    }
  }
  for (const gift::v1::TensorOverride& o : policy.overrides()) {
    if (statistics || !GlobMatch(o.glob(), name)) continue;
    if (o.has_sides()) out.transform.set_sides(o.sides());
    if (!o.powers().empty()) *out.transform.mutable_powers() = o.powers();
    if (o.has_source()) out.transform.set_source(o.source());
    if (o.has_rank()) out.transform.set_rank(o.rank());
    if (o.has_residual()) out.transform.set_residual(o.residual());
    if (o.has_period_steps()) out.period_steps = o.period_steps();
    if (o.has_enabled()) enabled = o.enabled();
    if (o.has_error_feedback()) out.transform.set_error_feedback(o.error_feedback());
    if (o.has_push_codec()) {
      *out.transform.mutable_push_codec() = o.push_codec();
      out.push_codec_overridden = true;
    }
    if (o.has_pull_codec()) *out.transform.mutable_pull_codec() = o.pull_codec();
    if (o.has_rotation_block()) out.transform.set_rotation_block(o.rotation_block());
    if (o.has_statistics_columns()) out.transform.set_statistics_columns(o.statistics_columns());
  }
  // The rotation works within rows (the last dimension) in whole blocks.
  const uint32_t block = out.transform.rotation_block();
  if (block != 0 && (shape.empty() || shape.back() % block != 0)) {
    out.transform.set_rotation_block(0);
  }

  const gift::v1::SelectionPolicy& s = policy.selection();
  auto matches_any = [name](const auto& globs) {
    for (const std::string& glob : globs) {
      if (GlobMatch(glob, name)) return true;
    }
    return false;
  };
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d < 0 ? 0 : d);

  if (!IsTransformable(shape)) {
    out.selection = Selection::kDirect;
  } else if (enabled.has_value()) {
    out.selection = *enabled ? Selection::kTransform : Selection::kDirect;
  } else if (matches_any(s.exclude())) {
    out.selection = Selection::kDirect;
  } else if (s.mode() == gift::v1::SELECTION_MODE_LIST) {
    out.selection = matches_any(s.include()) ? Selection::kTransform : Selection::kDirect;
  } else if ((!s.include().empty() && !matches_any(s.include())) || elements < s.min_elements()) {
    out.selection = Selection::kDirect;
  } else {
    out.selection = Selection::kMeasure;
  }
  return out;
}

absl::Status ValidateRanksForTensors(const Policy& policy, absl::Span<const NamedShape> tensors) {
  // Each explicit rank against the tensors it applies to: the global one
  // (unless it is the default, which is meant to be clamped) against every
  // transformable tensor, an override's against those its glob matches.
  struct Field {
    std::string name;
    uint32_t rank;
    const std::string* glob;  // null: every tensor
  };
  std::vector<Field> fields;
  if (policy.transform().rank() != kDefaultRank) {
    fields.push_back({"transform.rank", policy.transform().rank(), nullptr});
  }
  for (int i = 0; i < policy.overrides_size(); ++i) {
    const gift::v1::TensorOverride& o = policy.overrides(i);
    if (o.has_rank())
      fields.push_back({absl::StrCat("overrides[", i, "].rank"), o.rank(), &o.glob()});
  }
  for (const Field& f : fields) {
    int64_t bound = 0;
    const NamedShape* widest = nullptr;
    for (const NamedShape& t : tensors) {
      if (!IsTransformable(t.shape)) continue;
      if (f.glob != nullptr && !GlobMatch(*f.glob, t.name)) continue;
      const int64_t b = RankBound(ResolveTensorSettings(policy, t.name, t.shape), t.shape);
      if (widest == nullptr || b > bound) {
        bound = b;
        widest = &t;
      }
    }
    if (widest != nullptr && f.rank > bound) {
      return Invalid(f.name, f.rank,
                     absl::StrCat("above the dimensions of every tensor it applies to (the "
                                  "largest rank that takes effect is ",
                                  bound, ", tensor '", widest->name, "' [",
                                  absl::StrJoin(widest->shape, ", "), "])"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::policy
