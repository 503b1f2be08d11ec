#include "tools/giftctl/policy_edit.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/policy.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;

namespace {

// A name <-> enum table.
template <typename Enum>
struct Choice {
  const char* name;
  Enum value;
};

constexpr Choice<v1::Sides> kSides[] = {
    {"both", v1::SIDES_BOTH}, {"in", v1::SIDES_INPUT}, {"out", v1::SIDES_OUTPUT}};
constexpr Choice<v1::GeometrySource> kSources[] = {
    {"gradients", v1::GEOMETRY_SOURCE_GRADIENTS},
    {"per-worker", v1::GEOMETRY_SOURCE_PER_WORKER_GRADIENTS},
    {"activations", v1::GEOMETRY_SOURCE_ACTIVATIONS},
    {"activations-per-worker", v1::GEOMETRY_SOURCE_ACTIVATIONS_PER_WORKER}};
constexpr Choice<v1::ResidualModel> kResiduals[] = {{"isotropic", v1::RESIDUAL_MODEL_ISOTROPIC},
                                                    {"diagonal", v1::RESIDUAL_MODEL_DIAGONAL}};
constexpr Choice<v1::SelectionMode> kSelections[] = {{"measured", v1::SELECTION_MODE_MEASURED},
                                                     {"list", v1::SELECTION_MODE_LIST}};
constexpr Choice<v1::Hierarchy> kHierarchies[] = {{"none", v1::HIERARCHY_NONE},
                                                  {"node", v1::HIERARCHY_NODE}};
constexpr Choice<v1::StatisticsForm> kStatistics[] = {{"sketch", v1::STATISTICS_FORM_SKETCH},
                                                      {"exact", v1::STATISTICS_FORM_EXACT}};
constexpr Choice<v1::OnMemberLoss> kOnMemberLoss[] = {{"continue", v1::ON_MEMBER_LOSS_CONTINUE},
                                                      {"fail", v1::ON_MEMBER_LOSS_FAIL}};

template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseChoice(const Choice<Enum> (&choices)[N], absl::string_view what,
                                 absl::string_view text) {
  std::vector<std::string> names;
  for (const Choice<Enum>& c : choices) {
    if (text == c.name) return c.value;
    names.push_back(c.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", what, ": '", text, "' is not one of ", absl::StrJoin(names, "|")));
}

template <typename Enum, size_t N>
std::string ChoiceName(const Choice<Enum> (&choices)[N], Enum value) {
  for (const Choice<Enum>& c : choices) {
    if (c.value == value) return c.name;
  }
  return "-";
}

bool InUnitInterval(double x) { return x >= 0.0 && x < 1.0; }

}  // namespace

absl::StatusOr<v1::Sides> ParseSides(absl::string_view text) {
  return ParseChoice(kSides, "sides", text);
}
absl::StatusOr<v1::GeometrySource> ParseSource(absl::string_view text) {
  return ParseChoice(kSources, "source", text);
}
absl::StatusOr<v1::ResidualModel> ParseResidual(absl::string_view text) {
  return ParseChoice(kResiduals, "residual", text);
}
absl::StatusOr<v1::SelectionMode> ParseSelection(absl::string_view text) {
  return ParseChoice(kSelections, "selection", text);
}
std::string SidesName(v1::Sides sides) { return ChoiceName(kSides, sides); }
std::string SourceName(v1::GeometrySource source) { return ChoiceName(kSources, source); }
std::string ResidualName(v1::ResidualModel residual) { return ChoiceName(kResiduals, residual); }
std::string SelectionName(v1::SelectionMode mode) { return ChoiceName(kSelections, mode); }
absl::StatusOr<v1::Hierarchy> ParseHierarchy(absl::string_view text) {
  return ParseChoice(kHierarchies, "hierarchy", text);
}
std::string HierarchyName(v1::Hierarchy hierarchy) {
  return ChoiceName(kHierarchies,
                    hierarchy == v1::HIERARCHY_UNSPECIFIED ? v1::HIERARCHY_NONE : hierarchy);
}
absl::StatusOr<v1::OnMemberLoss> ParseOnMemberLoss(absl::string_view text) {
  return ParseChoice(kOnMemberLoss, "on-member-loss", text);
}
std::string OnMemberLossName(v1::OnMemberLoss on_loss) {
  return ChoiceName(kOnMemberLoss, on_loss == v1::ON_MEMBER_LOSS_UNSPECIFIED
                                       ? v1::ON_MEMBER_LOSS_CONTINUE
                                       : on_loss);
}

absl::StatusOr<v1::StatisticsForm> ParseStatistics(absl::string_view text) {
  return ParseChoice(kStatistics, "statistics", text);
}
std::string StatisticsName(v1::StatisticsForm form) {
  return ChoiceName(kStatistics,
                    form == v1::STATISTICS_FORM_UNSPECIFIED ? v1::STATISTICS_FORM_SKETCH : form);
}

absl::StatusOr<double> ParseGiftBudget(absl::string_view text) {
  absl::StatusOr<std::optional<double>> budget = policy::ParseGiftBudget(text);
  if (!budget.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--gift-budget: ", budget.status().message()));
  }
  return budget->value_or(kAutoGiftBudget);
}

std::string GiftBudgetName(double budget) { return budget == 0.0 ? "off" : absl::StrCat(budget); }

std::string CodecName(const v1::CodecSpec& spec) {
  absl::StatusOr<codec::CodecSpec> parsed = codec::FromProto(spec);
  return parsed.ok() ? codec::ToString(*parsed) : "-";
}

absl::StatusOr<uint32_t> ParseRotationBlock(absl::string_view text) {
  uint32_t block = 0;
  if (text == "off") return 0u;
  if (!absl::SimpleAtoi(text, &block) || !policy::IsRotationBlock(block)) {
    return absl::InvalidArgumentError(absl::StrCat("--rotation-block '", text,
                                                   "': give off or a power of two in [2, ",
                                                   policy::kMaxRotationBlock, "]"));
  }
  return block;
}

std::string RotationBlockName(uint32_t block) { return block == 0 ? "off" : absl::StrCat(block); }

bool PolicyEdit::empty() const {
  return !period_steps && !rank && !powers && !sides && !source && !residual && !enabled &&
         !error_feedback && !rotation_block && !ema_decay && !collect_period &&
         !direct_collect_stride && !measure_period && !statistics && !statistics_codec &&
         !statistics_columns && !push_codec && !pull_codec && !drift_threshold && !margin &&
         !gift_budget && !target && !selection && !hierarchy && !on_member_loss && !include &&
         !exclude;
}

namespace {

// Every rule the coordinator checks a policy against (policy::Validate),
// checked before anything is sent: the edit applied to the default policy.
// What depends on the coordinator's current policy (another field that
// conflicts) is still the coordinator's to refuse.
absl::Status CheckAgainstCoordinatorRules(const PolicyEdit& edit) {
  v1::Policy candidate = policy::WithDefaults(v1::Policy());
  ApplyPolicyEdit(edit, &candidate);
  if (absl::Status s = policy::Validate(candidate); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator would refuse this policy: ", s.message()));
  }
  return absl::OkStatus();
}

// `value`, when the edit gives it, in [1, max]; InvalidArgument naming `flag`.
absl::Status CheckCount(const std::optional<uint32_t>& value, absl::string_view flag,
                        uint32_t max) {
  if (value && (*value < 1 || *value > max)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be in [1, ", max, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePolicyEdit(const PolicyEdit& edit) {
  GIFT_RETURN_IF_ERROR(CheckCount(edit.period_steps, "--period", policy::kMaxSteps));
  GIFT_RETURN_IF_ERROR(CheckCount(edit.rank, "--rank", policy::kMaxRank));
  if (edit.powers) {
    if (edit.powers->empty()) return absl::InvalidArgumentError("--power needs a value");
    for (double p : *edit.powers) {
      if (!(p > 0.0) || !std::isfinite(p)) {
        return absl::InvalidArgumentError(absl::StrCat("--power ", p, " is not a finite p > 0"));
      }
    }
  }
  GIFT_RETURN_IF_ERROR(CheckCount(edit.collect_period, "--collect-period", policy::kMaxSteps));
  GIFT_RETURN_IF_ERROR(
      CheckCount(edit.direct_collect_stride, "--direct-collect-stride", policy::kMaxSteps));
  GIFT_RETURN_IF_ERROR(CheckCount(edit.measure_period, "--measure-period", policy::kMaxSteps));
  GIFT_RETURN_IF_ERROR(
      CheckCount(edit.statistics_columns, "--statistics-columns", policy::kMaxStatisticsColumns));
  if (edit.ema_decay && !InUnitInterval(*edit.ema_decay)) {
    return absl::InvalidArgumentError("--ema-decay must be in [0, 1)");
  }
  if (edit.margin && !InUnitInterval(*edit.margin)) {
    return absl::InvalidArgumentError("--margin must be in [0, 1)");
  }
  if (edit.drift_threshold &&
      !(*edit.drift_threshold >= 0.0 && std::isfinite(*edit.drift_threshold))) {
    return absl::InvalidArgumentError("--drift must be a finite value >= 0");
  }
  if (edit.tensor_glob.empty()) {
    if (edit.enabled) return absl::InvalidArgumentError("--enabled needs --tensor GLOB");
    return CheckAgainstCoordinatorRules(edit);
  }
  std::vector<absl::string_view> global_only;
  if (edit.ema_decay) global_only.push_back("--ema-decay");
  if (edit.collect_period) global_only.push_back("--collect-period");
  if (edit.direct_collect_stride) global_only.push_back("--direct-collect-stride");
  if (edit.measure_period) global_only.push_back("--measure-period");
  if (edit.statistics) global_only.push_back("--statistics");
  if (edit.statistics_codec) global_only.push_back("--statistics-codec");
  if (edit.drift_threshold) global_only.push_back("--drift");
  if (edit.margin) global_only.push_back("--margin");
  if (edit.gift_budget) global_only.push_back("--gift-budget");
  if (edit.target) global_only.push_back("--target");
  if (edit.selection) global_only.push_back("--selection");
  if (edit.hierarchy) global_only.push_back("--hierarchy");
  if (edit.on_member_loss) global_only.push_back("--on-member-loss");
  if (edit.include) global_only.push_back("--include");
  if (edit.exclude) global_only.push_back("--exclude");
  if (!global_only.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(global_only, ", "),
                     " apply to the global policy only; a --tensor override can set --period, "
                     "--rank, --power, --sides, --source, --residual, --enabled, --push-codec, "
                     "--pull-codec, --error-feedback, --rotation-block and --statistics-columns"));
  }
  return CheckAgainstCoordinatorRules(edit);
}

void ApplyPolicyEdit(const PolicyEdit& edit, v1::Policy* policy) {
  if (!edit.tensor_glob.empty()) {
    v1::TensorOverride* o = nullptr;
    for (int i = policy->overrides_size() - 1; i >= 0 && o == nullptr; --i) {
      if (policy->overrides(i).glob() == edit.tensor_glob) o = policy->mutable_overrides(i);
    }
    if (o == nullptr) {
      o = policy->add_overrides();
      o->set_glob(edit.tensor_glob);
    }
    if (edit.period_steps) o->set_period_steps(*edit.period_steps);
    if (edit.rank) o->set_rank(*edit.rank);
    if (edit.powers) o->mutable_powers()->Assign(edit.powers->begin(), edit.powers->end());
    if (edit.sides) o->set_sides(*edit.sides);
    if (edit.source) o->set_source(*edit.source);
    if (edit.residual) o->set_residual(*edit.residual);
    if (edit.enabled) o->set_enabled(*edit.enabled);
    if (edit.error_feedback) o->set_error_feedback(*edit.error_feedback);
    if (edit.rotation_block) o->set_rotation_block(*edit.rotation_block);
    if (edit.statistics_columns) o->set_statistics_columns(*edit.statistics_columns);
    if (edit.push_codec) *o->mutable_push_codec() = *edit.push_codec;
    if (edit.pull_codec) *o->mutable_pull_codec() = *edit.pull_codec;
    return;
  }
  v1::TransformPolicy* t = policy->mutable_transform();
  v1::RefreshPolicy* r = policy->mutable_refresh();
  v1::SelectionPolicy* s = policy->mutable_selection();
  if (edit.period_steps) r->set_period_steps(*edit.period_steps);
  if (edit.rank) t->set_rank(*edit.rank);
  if (edit.powers) t->mutable_powers()->Assign(edit.powers->begin(), edit.powers->end());
  if (edit.sides) t->set_sides(*edit.sides);
  if (edit.source) t->set_source(*edit.source);
  if (edit.residual) t->set_residual(*edit.residual);
  if (edit.ema_decay) t->set_ema_decay(*edit.ema_decay);
  if (edit.collect_period) t->set_collect_period(*edit.collect_period);
  if (edit.direct_collect_stride) t->set_direct_collect_stride(*edit.direct_collect_stride);
  if (edit.statistics) t->set_statistics(*edit.statistics);
  if (edit.statistics_codec) *t->mutable_statistics_codec() = *edit.statistics_codec;
  if (edit.statistics_columns) t->set_statistics_columns(*edit.statistics_columns);
  if (edit.error_feedback) t->set_error_feedback(*edit.error_feedback);
  if (edit.rotation_block) t->set_rotation_block(*edit.rotation_block);
  if (edit.push_codec) *t->mutable_push_codec() = *edit.push_codec;
  if (edit.pull_codec) *t->mutable_pull_codec() = *edit.pull_codec;
  if (edit.drift_threshold) r->set_drift_threshold(*edit.drift_threshold);
  if (edit.measure_period) r->set_measure_period(*edit.measure_period);
  if (edit.margin) s->set_margin(*edit.margin);
  if (edit.gift_budget) {
    if (*edit.gift_budget == kAutoGiftBudget) {
      s->clear_gift_budget();
    } else {
      s->set_gift_budget(*edit.gift_budget);
    }
  }
  if (edit.target) {
    const bool off = edit.target->format() == v1::ELEMENT_FORMAT_UNSPECIFIED;
    s->set_target_off(off);
    if (off) {
      s->clear_target();
      s->clear_target_codecs();
    } else {
      *s->mutable_target() = *edit.target;
    }
  }
  if (edit.selection) s->set_mode(*edit.selection);
  if (edit.hierarchy) policy->set_hierarchy(*edit.hierarchy);
  if (edit.on_member_loss) policy->set_on_member_loss(*edit.on_member_loss);
  if (edit.include) s->mutable_include()->Assign(edit.include->begin(), edit.include->end());
  if (edit.exclude) s->mutable_exclude()->Assign(edit.exclude->begin(), edit.exclude->end());
}

}  // namespace gift::giftctl
