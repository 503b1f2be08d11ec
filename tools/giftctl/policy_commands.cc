// giftctl policy get, giftctl policy set.
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "nlohmann/json.hpp"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/output.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;
using nlohmann::json;

namespace {

std::string Powers(const google::protobuf::RepeatedField<double>& powers) {
  return powers.empty() ? "-" : absl::StrJoin(powers, ",");
}

void PrintPolicy(const v1::Policy& p, bool as_json, std::ostream& out) {
  if (as_json) {
    out << ProtoJson(p).dump(2) << '\n';
    return;
  }
  const v1::TransformPolicy& t = p.transform();
  const v1::RefreshPolicy& r = p.refresh();
  const v1::SelectionPolicy& s = p.selection();
  Table g({"FIELD", "VALUE"});
  g.Add({"version", absl::StrCat(p.version())});
  g.Add({"sides", SidesName(t.sides())});
  g.Add({"powers", Powers(t.powers())});
  g.Add({"source", SourceName(t.source())});
  g.Add({"rank", NumOrDash(t.rank())});
  g.Add({"residual", ResidualName(t.residual())});
  g.Add({"ema_decay", NumOrDash(t.ema_decay())});
  g.Add({"collect_period", NumOrDash(t.collect_period())});
  g.Add({"direct_collect_stride", NumOrDash(t.direct_collect_stride())});
  g.Add({"statistics", StatisticsName(t.statistics())});
  g.Add({"damping_eps", NumOrDash(t.damping_eps())});
  g.Add({"push_codec", CodecName(t.push_codec())});
  g.Add({"pull_codec", CodecName(t.pull_codec())});
  g.Add({"statistics_codec", CodecName(t.statistics_codec())});
  g.Add({"statistics_columns", NumOrDash(t.statistics_columns())});
  g.Add({"error_feedback", t.error_feedback() ? "true" : "false"});
  g.Add({"rotation_block", RotationBlockName(t.rotation_block())});
  g.Add({"period_steps", NumOrDash(r.period_steps())});
  g.Add({"drift_threshold", NumOrDash(r.drift_threshold())});
  g.Add({"activation_lead_steps", NumOrDash(r.activation_lead_steps())});
  g.Add({"measure_period", NumOrDash(r.measure_period())});
  g.Add({"selection", SelectionName(s.mode())});
  g.Add({"include", Or(absl::StrJoin(s.include(), ","))});
  g.Add({"exclude", Or(absl::StrJoin(s.exclude(), ","))});
  g.Add({"margin", NumOrDash(s.margin())});
  g.Add({"min_elements", NumOrDash(s.min_elements())});
  g.Add({"gift_budget", s.has_gift_budget() ? GiftBudgetName(s.gift_budget()) : "auto"});
  g.Add({"target", s.target_off() ? "off" : CodecName(s.target())});
  std::vector<std::string> target_codecs;
  for (const v1::CodecSpec& c : s.target_codecs()) target_codecs.push_back(CodecName(c));
  g.Add({"target_codecs", s.target_off() ? "-" : Or(absl::StrJoin(target_codecs, ","))});
  g.Add({"hierarchy", HierarchyName(p.hierarchy())});
  g.Add({"on_member_loss", OnMemberLossName(p.on_member_loss())});
  g.Print(out);
  if (p.overrides().empty()) return;
  out << "\noverrides (the last matching glob wins, field by field):\n";
  Table o({"GLOB", "SIDES", "POWERS", "SOURCE", "RANK", "RESIDUAL", "PERIOD", "ENABLED", "PUSH",
           "PULL", "ERROR_FEEDBACK", "ROTATION", "SKETCH_COLUMNS"});
  for (const v1::TensorOverride& x : p.overrides()) {
    o.Add({x.glob(), x.has_sides() ? SidesName(x.sides()) : "-", Powers(x.powers()),
           x.has_source() ? SourceName(x.source()) : "-",
           x.has_rank() ? absl::StrCat(x.rank()) : "-",
           x.has_residual() ? ResidualName(x.residual()) : "-",
           x.has_period_steps() ? absl::StrCat(x.period_steps()) : "-",
           x.has_enabled() ? (x.enabled() ? "true" : "false") : "-",
           x.has_push_codec() ? CodecName(x.push_codec()) : "-",
           x.has_pull_codec() ? CodecName(x.pull_codec()) : "-",
           x.has_error_feedback() ? (x.error_feedback() ? "on" : "off") : "-",
           x.has_rotation_block() ? RotationBlockName(x.rotation_block()) : "-",
           x.has_statistics_columns() ? absl::StrCat(x.statistics_columns()) : "-"});
  }
  o.Print(out);
}

absl::StatusOr<v1::CodecSpec> ParseCodec(const std::string& flag, const std::string& text) {
  absl::StatusOr<codec::CodecSpec> spec = codec::ParseCodecSpec(text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", spec.status().message()));
  }
  return codec::ToProto(*spec);
}

// `on` or `off` (e.g. "true" or "false") as a bool; InvalidArgument naming
// `flag` for any other text.
absl::StatusOr<bool> ParseSwitch(const std::string& flag, const std::string& text, const char* on,
                                 const char* off) {
  if (text != on && text != off) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " takes ", on, " or ", off));
  }
  return text == on;
}

// Sets `field` to a flag's parsed value, or returns why it did not parse.
template <typename T>
absl::Status SetParsed(absl::StatusOr<T> parsed, std::optional<T>& field) {
  if (!parsed.ok()) return parsed.status();
  field = *std::move(parsed);
  return absl::OkStatus();
}

}  // namespace

absl::Status PolicyGetCommand(const CommandContext& ctx) {
  absl::StatusOr<v1::Policy> policy = ctx.client.GetPolicy();
  if (!policy.ok()) return policy.status();
  PrintPolicy(*policy, ctx.json, ctx.out);
  return absl::OkStatus();
}

absl::Status PolicySetCommand(const CommandContext& ctx, const PolicyEdit& edit) {
  absl::StatusOr<v1::Policy> updated;
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<v1::Policy> current = ctx.client.GetPolicy();
    if (!current.ok()) return current.status();
    v1::Policy policy = *current;
    ApplyPolicyEdit(edit, &policy);
    updated = ctx.client.SetPolicy(policy, current->version());
    if (!absl::IsAborted(updated.status())) break;
  }
  if (!updated.ok()) return updated.status();
  PrintPolicy(*updated, ctx.json, ctx.out);
  return absl::OkStatus();
}

bool PolicySetFlags::given(const std::string& name) const { return options.at(name)->count() > 0; }

void AddPolicySetFlags(CLI::App* cmd, PolicySetFlags* f) {
  auto& o = f->options;
  o["tensor"] = cmd->add_option("--tensor", f->tensor,
                                "write the per-tensor override for this name glob instead of the "
                                "global policy");
  o["period"] = cmd->add_option("--period", f->period, "refresh period in steps (1 to 1048576)");
  o["rank"] = cmd->add_option("--rank", f->rank, "approximation rank r (1 to 65536)");
  o["power"] = cmd->add_option("--power", f->powers,
                               "candidate power(s) p in (0, 1]; repeat or give a comma list")
                   ->delimiter(',');
  o["sides"] = cmd->add_option("--sides", f->sides, "transformed sides: both|in|out");
  o["source"] =
      cmd->add_option("--source", f->source,
                      "geometry source: gradients|per-worker|activations|activations-per-worker");
  o["residual"] = cmd->add_option("--residual", f->residual, "residual model: isotropic|diagonal");
  o["enabled"] = cmd->add_option("--enabled", f->enabled,
                                 "with --tensor: true (always transformed) or false (always "
                                 "direct)");
  o["error-feedback"] = cmd->add_option("--error-feedback", f->error_feedback,
                                        "on|off: feed each push's quantization error into the "
                                        "next (global, or with --tensor for its override)");
  o["rotation-block"] = cmd->add_option(
      "--rotation-block", f->rotation_block,
      "off|B: rotate each row in blocks of B (a power of two, 2 to 256) after the transform, "
      "before the push codec; lowers what NVFP4 flushes to zero (global, or with --tensor "
      "for its override)");
  o["ema-decay"] = cmd->add_option("--ema-decay", f->ema_decay, "EMA decay in [0, 1)");
  o["collect-period"] =
      cmd->add_option("--collect-period", f->collect_period,
                      "fold the reduced gradient into the statistics every N steps (1 to 1048576)");
  o["direct-collect-stride"] = cmd->add_option(
      "--direct-collect-stride", f->direct_collect_stride,
      "once a refresh left a tensor direct, fold its statistics every N collect steps only "
      "(1 to 1048576; less worker CPU, noisier statistics for its next basis)");
  o["statistics"] =
      cmd->add_option("--statistics", f->statistics,
                      "sketch|exact: the reduced gradient's moments as a Nystrom sketch "
                      "(O(m n k)) or whole n x n matrices in double (O(n^2 m))");
  o["statistics-codec"] = cmd->add_option(
      "--statistics-codec", f->statistics_codec,
      "codec of the per-worker sketches both ways (per-worker geometry sources), e.g. "
      "e4m3/block128 for half the bytes of the default bf16");
  o["statistics-columns"] = cmd->add_option(
      "--statistics-columns", f->statistics_columns,
      "columns k of each side's per-worker sketch (1 to 1024; default 128): (d_in + d_out) x k "
      "values per worker and collect step; fewer send fewer bytes and cap the basis rank at k "
      "(global, or with --tensor for its override)");
  o["push-codec"] = cmd->add_option("--push-codec", f->push_codec,
                                    "codec workers -> servers, e.g. e4m3/block128");
  o["pull-codec"] =
      cmd->add_option("--pull-codec", f->pull_codec, "codec servers -> workers, e.g. bf16");
  o["drift"] =
      cmd->add_option("--drift", f->drift, "early-refresh drift threshold (>= 0; 0 disables)");
  o["measure-period"] = cmd->add_option(
      "--measure-period", f->measure_period,
      "owners measure their bases' error ratio (drift, giftctl tensors) every N steps "
      "(1 to 1048576)");
  o["margin"] = cmd->add_option("--margin", f->margin, "selection margin in [0, 1)");
  o["selection"] = cmd->add_option("--selection", f->selection, "selection mode: measured|list");
  o["gift-budget"] = cmd->add_option(
      "--gift-budget", f->gift_budget,
      "auto|off|FRACTION: measured selection keeps the transforms within this fraction of "
      "the step over direct quantization (auto: 0.05)");
  o["target"] = cmd->add_option(
      "--target", f->target,
      "SPEC|off: the fidelity target; each measured tensor travels in the fewest bytes (codecs "
      "of the target's list, direct or through its basis) whose measured error is at most "
      "that of SPEC, direct (default e4m3/block128); off: the tensors keep their codecs");
  o["hierarchy"] = cmd->add_option("--hierarchy", f->hierarchy,
                                   "none|node: node-local aggregation first (workers of one "
                                   "--node); a change starts a new epoch");
  o["on-member-loss"] = cmd->add_option(
      "--on-member-loss", f->on_member_loss,
      "continue|fail: when a worker leaves, the survivors go on in the smaller world (each "
      "client is told, Python: WorldSizeChanged) or every step fails naming it until the "
      "training processes register again");
  o["include"] = cmd->add_option("--include", f->include,
                                 "tensor-name glob to include (repeatable; replaces the list)");
  o["exclude"] = cmd->add_option("--exclude", f->exclude,
                                 "tensor-name glob to exclude (repeatable; replaces the list)");
}

absl::StatusOr<PolicyEdit> ToPolicyEdit(const PolicySetFlags& f) {
  PolicyEdit e;
  e.tensor_glob = f.tensor;
  if (f.given("tensor") && f.tensor.empty()) {
    return absl::InvalidArgumentError("--tensor needs a nonempty glob");
  }
  if (f.given("period")) e.period_steps = f.period;
  if (f.given("rank")) e.rank = f.rank;
  if (f.given("power")) e.powers = f.powers;
  if (f.given("sides")) GIFT_RETURN_IF_ERROR(SetParsed(ParseSides(f.sides), e.sides));
  if (f.given("source")) GIFT_RETURN_IF_ERROR(SetParsed(ParseSource(f.source), e.source));
  if (f.given("residual")) GIFT_RETURN_IF_ERROR(SetParsed(ParseResidual(f.residual), e.residual));
  if (f.given("enabled")) {
    GIFT_RETURN_IF_ERROR(
        SetParsed(ParseSwitch("--enabled", f.enabled, "true", "false"), e.enabled));
  }
  if (f.given("error-feedback")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseSwitch("--error-feedback", f.error_feedback, "on", "off"),
                                   e.error_feedback));
  }
  if (f.given("rotation-block")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseRotationBlock(f.rotation_block), e.rotation_block));
  }
  if (f.given("ema-decay")) e.ema_decay = f.ema_decay;
  if (f.given("collect-period")) e.collect_period = f.collect_period;
  if (f.given("direct-collect-stride")) e.direct_collect_stride = f.direct_collect_stride;
  if (f.given("statistics")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseStatistics(f.statistics), e.statistics));
  }
  if (f.given("statistics-codec")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseCodec("--statistics-codec", f.statistics_codec),
                                   e.statistics_codec));
  }
  if (f.given("statistics-columns")) e.statistics_columns = f.statistics_columns;
  if (f.given("push-codec")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseCodec("--push-codec", f.push_codec), e.push_codec));
  }
  if (f.given("pull-codec")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseCodec("--pull-codec", f.pull_codec), e.pull_codec));
  }
  if (f.given("drift")) e.drift_threshold = f.drift;
  if (f.given("measure-period")) e.measure_period = f.measure_period;
  if (f.given("margin")) e.margin = f.margin;
  if (f.given("gift-budget")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseGiftBudget(f.gift_budget), e.gift_budget));
  }
  if (f.given("target")) {
    if (f.target == "off") {
      e.target = v1::CodecSpec();
    } else {
      GIFT_RETURN_IF_ERROR(SetParsed(ParseCodec("--target", f.target), e.target));
    }
  }
  if (f.given("selection")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseSelection(f.selection), e.selection));
  }
  if (f.given("hierarchy")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseHierarchy(f.hierarchy), e.hierarchy));
  }
  if (f.given("on-member-loss")) {
    GIFT_RETURN_IF_ERROR(SetParsed(ParseOnMemberLoss(f.on_member_loss), e.on_member_loss));
  }
  if (f.given("include")) e.include = f.include;
  if (f.given("exclude")) e.exclude = f.exclude;
  if (e.empty()) return absl::InvalidArgumentError("nothing to change; see policy set --help");
  if (absl::Status valid = ValidatePolicyEdit(e); !valid.ok()) return valid;
  return e;
}

}  // namespace gift::giftctl
