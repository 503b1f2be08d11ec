// The policy fields `giftctl policy set` can change, and how a change is
// applied to a gift.v1.Policy: only the fields given are touched, either in
// the global policy or in the per-tensor override of one glob.
//
// Plain values and stateless functions; thread-compatible.
#ifndef GIFT_TOOLS_GIFTCTL_POLICY_EDIT_H_
#define GIFT_TOOLS_GIFTCTL_POLICY_EDIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gift/v1/policy.pb.h"

namespace gift::giftctl {

struct PolicyEdit {
  // Nonempty: edit (or create) the override whose glob equals this one,
  // instead of the global policy.
  std::string tensor_glob;

  std::optional<uint32_t> period_steps;
  std::optional<uint32_t> rank;
  std::optional<std::vector<double>> powers;
  std::optional<gift::v1::Sides> sides;
  std::optional<gift::v1::GeometrySource> source;
  std::optional<gift::v1::ResidualModel> residual;
  std::optional<bool> enabled;  // overrides only
  std::optional<bool> error_feedback;
  // 0 (off) or a power of two in [2, policy::kMaxRotationBlock].
  std::optional<uint32_t> rotation_block;
  // Global, or the override's codecs for the tensors it matches:
  std::optional<gift::v1::CodecSpec> push_codec;
  std::optional<gift::v1::CodecSpec> pull_codec;
  // Global policy only:
  std::optional<double> ema_decay;
  std::optional<uint32_t> collect_period;
  std::optional<uint32_t> direct_collect_stride;
  std::optional<uint32_t> measure_period;
  std::optional<gift::v1::StatisticsForm> statistics;
  std::optional<gift::v1::CodecSpec> statistics_codec;
  std::optional<uint32_t> statistics_columns;
  std::optional<double> drift_threshold;
  std::optional<double> margin;
  // A fraction >= 0 (0: off); kAutoGiftBudget clears the field (the default).
  std::optional<double> gift_budget;
  // The fidelity target (selection.target); a spec of format UNSPECIFIED
  // turns it off.
  std::optional<gift::v1::CodecSpec> target;
  std::optional<gift::v1::SelectionMode> selection;
  std::optional<gift::v1::Hierarchy> hierarchy;
  std::optional<gift::v1::OnMemberLoss> on_member_loss;
  std::optional<std::vector<std::string>> include;
  std::optional<std::vector<std::string>> exclude;

  // True when no field would change.
  bool empty() const;
};

// Checks ranges (periods in [1, policy::kMaxSteps], rank in [1,
// policy::kMaxRank], powers > 0 and finite, EMA decay and margin in [0, 1),
// drift >= 0), that an override edit sets only the fields an override has,
// and every other rule the coordinator checks (policy::Validate on the edit
// applied to the default policy). InvalidArgument, naming the flag or the
// field, otherwise.
absl::Status ValidatePolicyEdit(const PolicyEdit& edit);

// Applies a validated edit to `policy` (its version is left alone).
void ApplyPolicyEdit(const PolicyEdit& edit, gift::v1::Policy* policy);

// PolicyEdit::gift_budget's "auto": back to the policy default.
inline constexpr double kAutoGiftBudget = -1.0;
// "--gift-budget" text (policy::ParseGiftBudget): "auto" (kAutoGiftBudget),
// "off" (0) or a fraction in [0, policy::kMaxGiftBudget].
absl::StatusOr<double> ParseGiftBudget(absl::string_view text);
// "off" for 0, else the fraction.
std::string GiftBudgetName(double budget);
// "--rotation-block" text: "off" (0) or a power of two in [2,
// policy::kMaxRotationBlock]. InvalidArgument naming the flag otherwise.
absl::StatusOr<uint32_t> ParseRotationBlock(absl::string_view text);
// "off" for 0, else the block.
std::string RotationBlockName(uint32_t block);

// The command-line names of the enums ("both", "in", "out"; "gradients",
// "per-worker", "activations"; "isotropic", "diagonal"; "measured", "list";
// "none", "node"; "continue", "fail"; "sketch", "exact"),
// parsed (InvalidArgument listing the choices) and printed ("-" for
// unspecified).
absl::StatusOr<gift::v1::Sides> ParseSides(absl::string_view text);
absl::StatusOr<gift::v1::GeometrySource> ParseSource(absl::string_view text);
absl::StatusOr<gift::v1::ResidualModel> ParseResidual(absl::string_view text);
absl::StatusOr<gift::v1::SelectionMode> ParseSelection(absl::string_view text);
absl::StatusOr<gift::v1::Hierarchy> ParseHierarchy(absl::string_view text);
absl::StatusOr<gift::v1::OnMemberLoss> ParseOnMemberLoss(absl::string_view text);
absl::StatusOr<gift::v1::StatisticsForm> ParseStatistics(absl::string_view text);
std::string SidesName(gift::v1::Sides sides);
std::string SourceName(gift::v1::GeometrySource source);
std::string ResidualName(gift::v1::ResidualModel residual);
std::string SelectionName(gift::v1::SelectionMode mode);
// HIERARCHY_UNSPECIFIED prints as "none" (its meaning).
std::string HierarchyName(gift::v1::Hierarchy hierarchy);
// "continue" | "fail"; UNSPECIFIED prints as "continue" (its meaning).
std::string OnMemberLossName(gift::v1::OnMemberLoss on_loss);
// "sketch" | "exact"; UNSPECIFIED prints as "sketch" (its meaning).
std::string StatisticsName(gift::v1::StatisticsForm form);

// "e4m3/block128/rne" for a codec spec, "-" when unset or invalid.
std::string CodecName(const gift::v1::CodecSpec& spec);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_POLICY_EDIT_H_
