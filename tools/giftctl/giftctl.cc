#include "tools/giftctl/giftctl.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "nlohmann/json.hpp"
#include "tools/giftctl/completion.h"
#include "tools/giftctl/connection_flags.h"
#include "tools/giftctl/health_check.h"
#include "tools/giftctl/policy_edit.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;
using control::CoordinatorClient;
using nlohmann::json;

std::string DefaultCoordinator() {
  const char* env = std::getenv("GIFT_COORDINATOR");
  return env != nullptr && env[0] != '\0' ? env : "localhost:7070";
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
      return kExitTempFail;
    default:
      return kExitError;
  }
}

namespace {

// ---- output helpers ----------------------------------------------------------

// Columns padded to their widest cell, two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      width.resize(std::max(width.size(), row.size()));
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
      }
      out << line << '\n';
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// A message in the proto3 JSON mapping, field names as in the .proto.
json ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) return json();
  return json::parse(text);
}

std::string RoleName(v1::MemberRole role) {
  switch (role) {
    case v1::MEMBER_ROLE_WORKER:
      return "worker";
    case v1::MEMBER_ROLE_SERVER:
      return "server";
    default:
      return "-";
  }
}

std::string StateName(v1::MemberState state) {
  switch (state) {
    case v1::MEMBER_STATE_ACTIVE:
      return "active";
    case v1::MEMBER_STATE_DRAINING:
      return "draining";
    default:
      return "-";
  }
}

std::string DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return "f32";
    case v1::DTYPE_BFLOAT16:
      return "bf16";
    case v1::DTYPE_FLOAT16:
      return "f16";
    default:
      return "-";
  }
}

std::string Or(const std::string& value, const std::string& fallback = "-") {
  return value.empty() ? fallback : value;
}

// 0 shows as "-" (the coordinator's default applies).
template <typename T>
std::string NumOrDash(T value) {
  return value == T{} ? "-" : absl::StrCat(value);
}

std::string Powers(const google::protobuf::RepeatedField<double>& powers) {
  return powers.empty() ? "-" : absl::StrJoin(powers, ",");
}

std::string Millis(int64_t ms) { return absl::FormatDuration(absl::Milliseconds(ms)); }

// The member names by id, for tables that show owners.
std::map<std::string, std::string> NamesById(const v1::ClusterState& state) {
  std::map<std::string, std::string> names;
  for (const v1::Member& m : state.workers()) names[m.member_id()] = m.name();
  for (const v1::Member& m : state.servers()) names[m.member_id()] = m.name();
  return names;
}

// ---- commands ----------------------------------------------------------------

struct Context {
  const CoordinatorClient& client;
  bool json;
  std::ostream& out;
};

// "step 41 for 12.3 s on ranks 2, 3", or "-" when no worker is ahead of another.
std::string WaitingText(const v1::StatusResponse& status) {
  if (status.slowest_ranks().empty() || status.max_step() < status.slowest_step()) return "-";
  return absl::StrFormat("step %d for %.1f s on rank%s %s", status.slowest_step(),
                         static_cast<double>(status.slowest_wait_ms()) / 1000.0,
                         status.slowest_ranks_size() == 1 ? "" : "s",
                         absl::StrJoin(status.slowest_ranks(), ", "));
}

absl::Status Status(const Context& ctx, const std::string& address) {
  absl::StatusOr<v1::StatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return status.status();
  const v1::ClusterState& s = status->state();
  int draining = 0;
  for (const v1::Member& m : s.workers()) draining += m.state() == v1::MEMBER_STATE_DRAINING;
  int pending = 0;
  for (const v1::TensorBasisState& b : s.bases()) pending += b.has_proposal();
  const int64_t uptime_ms = status->now_unix_ms() - status->started_unix_ms();
  if (ctx.json) {
    json j = {{"coordinator", address},
              {"version", status->version()},
              {"uptime_ms", uptime_ms},
              {"cluster_id", s.cluster_id()},
              {"revision", s.revision()},
              {"epoch", s.epoch()},
              {"workers", s.workers_size()},
              {"draining", draining},
              {"servers", s.servers_size()},
              {"tensors", s.tensors_size()},
              {"pending_refreshes", pending},
              {"chunks", s.shard_map().chunks_size()},
              {"policy_version", s.policy().version()},
              {"frozen_through_step", s.frozen_through_step()},
              {"slowest_step", status->slowest_step()},
              {"slowest_member_ids", status->slowest_member_ids()},
              {"slowest_ranks", status->slowest_ranks()},
              {"slowest_wait_ms", status->slowest_wait_ms()},
              {"max_step", status->max_step()}};
    ctx.out << j.dump(2) << '\n';
    return absl::OkStatus();
  }
  Table t({"FIELD", "VALUE"});
  t.Add({"coordinator", absl::StrCat(address, " (version ", Or(status->version()), ", up ",
                                     Millis(uptime_ms), ")")});
  t.Add({"cluster", Or(s.cluster_id())});
  t.Add({"revision", absl::StrCat(s.revision())});
  t.Add({"epoch", absl::StrCat(s.epoch())});
  t.Add({"workers", absl::StrCat(s.workers_size(), " (", draining, " draining)")});
  t.Add({"servers", absl::StrCat(s.servers_size())});
  t.Add({"tensors", absl::StrCat(s.tensors_size(), " in ", s.shard_map().chunks_size(), " chunks, ",
                                 pending, " refreshes pending")});
  t.Add({"policy", absl::StrCat("version ", s.policy().version())});
  t.Add({"frozen through step", absl::StrCat(s.frozen_through_step())});
  t.Add({"slowest step",
         absl::StrCat(status->slowest_step(), status->slowest_member_ids().empty() ? "" : " (",
                      absl::StrJoin(status->slowest_member_ids(), ", "),
                      status->slowest_member_ids().empty() ? "" : ")")});
  t.Add({"waiting", WaitingText(*status)});
  t.Print(ctx.out);
  return absl::OkStatus();
}

absl::Status Members(const Context& ctx) {
  absl::StatusOr<v1::StatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return status.status();
  const v1::ClusterState& s = status->state();
  if (ctx.json) {
    json j = {{"revision", s.revision()}, {"epoch", s.epoch()}};
    j["workers"] = json::array();
    j["servers"] = json::array();
    for (const v1::Member& m : s.workers()) j["workers"].push_back(ProtoJson(m));
    for (const v1::Member& m : s.servers()) j["servers"].push_back(ProtoJson(m));
    ctx.out << j.dump(2) << '\n';
    return absl::OkStatus();
  }
  Table t({"ROLE", "RANK", "NAME", "MEMBER", "STATE", "LAST_STEP", "LEASE_LEFT", "JOINED_EPOCH",
           "CONTROL"});
  for (const auto* members : {&s.workers(), &s.servers()}) {
    for (const v1::Member& m : *members) {
      t.Add({RoleName(m.role()), absl::StrCat(m.rank()), m.name(), m.member_id(),
             StateName(m.state()), absl::StrCat(m.last_step()),
             Millis(m.lease_expires_unix_ms() - status->now_unix_ms()),
             absl::StrCat(m.joined_epoch()), Or(m.control_address())});
    }
  }
  ctx.out << "epoch " << s.epoch() << ", " << s.workers_size() << " workers, " << s.servers_size()
          << " servers\n";
  t.Print(ctx.out);
  return absl::OkStatus();
}

std::string VersionText(const v1::BasisVersion& v) {
  return absl::StrCat("v", v.version(), v.direct() ? " direct" : absl::StrCat(" r", v.rank()), " @",
                      v.activation_step());
}

absl::Status Tensors(const Context& ctx) {
  absl::StatusOr<v1::StatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return status.status();
  const v1::ClusterState& s = status->state();
  const std::map<std::string, std::string> names = NamesById(s);
  std::map<uint64_t, const v1::TensorBasisState*> bases;
  for (const v1::TensorBasisState& b : s.bases()) bases[b.tensor_id()] = &b;
  std::map<uint64_t, int> chunks;
  for (const v1::Chunk& c : s.shard_map().chunks()) ++chunks[c.tensor_id()];
  const int live_members = s.workers_size();

  json j = json::array();
  Table t({"ID", "NAME", "SHAPE", "DTYPE", "CHUNKS", "OWNER", "ACTIVE", "PENDING", "RATIO"});
  for (const v1::TensorInfo& info : s.tensors()) {
    const auto it = bases.find(info.tensor_id());
    const v1::TensorBasisState* basis = it == bases.end() ? nullptr : it->second;
    if (ctx.json) {
      json entry = ProtoJson(info);
      entry["chunks"] = chunks[info.tensor_id()];
      entry["basis"] = basis == nullptr ? json() : ProtoJson(*basis);
      j.push_back(std::move(entry));
      continue;
    }
    std::string owner = "-", active = "-", pending = "-", ratio = "-";
    if (basis != nullptr) {
      const auto name = names.find(basis->owner_member_id());
      owner = name == names.end() ? Or(basis->owner_member_id()) : name->second;
      if (!basis->versions().empty()) {
        active = VersionText(basis->versions(basis->versions_size() - 1));
        if (basis->versions_size() > 1)
          active += absl::StrCat(" (", basis->versions_size(), " kept)");
      }
      if (basis->has_proposal()) {
        const v1::BasisProposal& p = basis->proposal();
        pending = absl::StrCat("v", p.version(), " @", p.tentative_activation_step(), " acks ",
                               p.acked_member_ids_size(), "/", live_members);
        if (p.postponements() > 0) absl::StrAppend(&pending, " postponed x", p.postponements());
      }
      if (basis->has_error_ratio()) {
        // The owner's last GIFT / direct error ratio, and its reference.
        const v1::TensorErrorRatio& r = basis->error_ratio();
        ratio = absl::StrFormat("%.3f @%d (ref %.3f)", r.ratio(), r.step(), r.reference());
      }
    }
    t.Add({absl::StrCat(info.tensor_id()), info.name(), absl::StrJoin(info.shape(), "x"),
           DTypeName(info.dtype()), absl::StrCat(chunks[info.tensor_id()]), owner, active,
           pending, ratio});
  }
  if (ctx.json) {
    ctx.out << j.dump(2) << '\n';
  } else {
    t.Print(ctx.out);
  }
  return absl::OkStatus();
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
  g.Add({"damping_eps", NumOrDash(t.damping_eps())});
  g.Add({"push_codec", CodecName(t.push_codec())});
  g.Add({"pull_codec", CodecName(t.pull_codec())});
  g.Add({"error_feedback", t.error_feedback() ? "true" : "false"});
  g.Add({"period_steps", NumOrDash(r.period_steps())});
  g.Add({"drift_threshold", NumOrDash(r.drift_threshold())});
  g.Add({"activation_lead_steps", NumOrDash(r.activation_lead_steps())});
  g.Add({"selection", SelectionName(s.mode())});
  g.Add({"include", Or(absl::StrJoin(s.include(), ","))});
  g.Add({"exclude", Or(absl::StrJoin(s.exclude(), ","))});
  g.Add({"margin", NumOrDash(s.margin())});
  g.Add({"min_elements", NumOrDash(s.min_elements())});
  g.Print(out);
  if (p.overrides().empty()) return;
  out << "\noverrides (the last matching glob wins, field by field):\n";
  Table o({"GLOB", "SIDES", "POWERS", "SOURCE", "RANK", "RESIDUAL", "PERIOD", "ENABLED", "PUSH",
           "PULL", "ERROR_FEEDBACK"});
  for (const v1::TensorOverride& x : p.overrides()) {
    o.Add({x.glob(), x.has_sides() ? SidesName(x.sides()) : "-", Powers(x.powers()),
           x.has_source() ? SourceName(x.source()) : "-",
           x.has_rank() ? absl::StrCat(x.rank()) : "-",
           x.has_residual() ? ResidualName(x.residual()) : "-",
           x.has_period_steps() ? absl::StrCat(x.period_steps()) : "-",
           x.has_enabled() ? (x.enabled() ? "true" : "false") : "-",
           x.has_push_codec() ? CodecName(x.push_codec()) : "-",
           x.has_pull_codec() ? CodecName(x.pull_codec()) : "-",
           x.has_error_feedback() ? (x.error_feedback() ? "on" : "off") : "-"});
  }
  o.Print(out);
}

absl::Status PolicyGet(const Context& ctx) {
  absl::StatusOr<v1::Policy> policy = ctx.client.GetPolicy();
  if (!policy.ok()) return policy.status();
  PrintPolicy(*policy, ctx.json, ctx.out);
  return absl::OkStatus();
}

// Read, modify, write with the version read; one retry when someone else
// changed the policy in between (ABORTED).
absl::Status PolicySet(const Context& ctx, const PolicyEdit& edit) {
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

absl::Status Refresh(const Context& ctx, const std::string& glob) {
  absl::StatusOr<v1::RequestRefreshResponse> response = ctx.client.RequestRefresh(glob);
  if (!response.ok()) return response.status();
  if (ctx.json) {
    ctx.out << json{{"tensors", response->tensors()}}.dump(2) << '\n';
    return absl::OkStatus();
  }
  ctx.out << "refresh requested for " << response->tensors_size() << " tensor(s)"
          << (response->tensors().empty() ? "" : ": ") << absl::StrJoin(response->tensors(), ", ")
          << '\n';
  return absl::OkStatus();
}

absl::Status RankSet(const Context& ctx, uint32_t rank, const std::string& glob) {
  absl::StatusOr<v1::SetRankResponse> response = ctx.client.SetRank(rank, glob);
  if (!response.ok()) return response.status();
  if (ctx.json) {
    ctx.out
        << json{{"policy", ProtoJson(response->policy())}, {"tensors", response->tensors()}}.dump(2)
        << '\n';
    return absl::OkStatus();
  }
  ctx.out << "rank " << rank << " set " << (glob.empty() ? "globally" : "for " + glob)
          << " (policy version " << response->policy().version() << "); refreshing "
          << response->tensors_size() << " tensor(s)" << (response->tensors().empty() ? "" : ": ")
          << absl::StrJoin(response->tensors(), ", ") << '\n';
  return absl::OkStatus();
}

absl::Status Drain(const Context& ctx, const std::string& worker) {
  // WORKER is a member id or a name; ask by id when the state knows it.
  v1::DrainRequest request;
  request.set_name(worker);
  absl::StatusOr<v1::StatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return status.status();
  for (const auto* members : {&status->state().workers(), &status->state().servers()}) {
    for (const v1::Member& m : *members) {
      if (m.member_id() == worker) {
        request.clear_name();
        request.set_member_id(worker);
      }
    }
  }
  absl::StatusOr<v1::DrainResponse> response = ctx.client.Drain(request);
  if (!response.ok()) return response.status();
  if (ctx.json) {
    ctx.out << ProtoJson(response->member()).dump(2) << '\n';
    return absl::OkStatus();
  }
  const v1::Member& m = response->member();
  ctx.out << "draining " << RoleName(m.role()) << " " << m.name() << " (" << m.member_id()
          << ", rank " << m.rank() << "); it leaves after its current step\n";
  return absl::OkStatus();
}

// ---- the command line --------------------------------------------------------

// The flags of `policy set`, as CLI11 fills them.
struct PolicyFlags {
  std::string tensor;
  uint32_t period = 0;
  uint32_t rank = 0;
  std::vector<double> powers;
  std::string sides, source, residual, selection, enabled, error_feedback;
  double ema_decay = 0, drift = 0, margin = 0;
  std::string push_codec, pull_codec;
  std::vector<std::string> include, exclude;
  std::map<std::string, CLI::Option*> options;

  bool given(const std::string& name) const { return options.at(name)->count() > 0; }
};

void AddPolicyFlags(CLI::App* cmd, PolicyFlags* f) {
  auto& o = f->options;
  o["tensor"] = cmd->add_option("--tensor", f->tensor,
                                "write the per-tensor override for this name glob instead of the "
                                "global policy");
  o["period"] = cmd->add_option("--period", f->period, "refresh period in steps (>= 1)");
  o["rank"] = cmd->add_option("--rank", f->rank, "approximation rank r (>= 1)");
  o["power"] =
      cmd->add_option("--power", f->powers, "candidate power(s) p > 0; repeat or give a comma list")
          ->delimiter(',');
  o["sides"] = cmd->add_option("--sides", f->sides, "transformed sides: both|in|out");
  o["source"] =
      cmd->add_option("--source", f->source, "geometry source: gradients|per-worker|activations");
  o["residual"] = cmd->add_option("--residual", f->residual, "residual model: isotropic|diagonal");
  o["enabled"] = cmd->add_option("--enabled", f->enabled,
                                 "with --tensor: true (always transformed) or false (always "
                                 "direct)");
  o["error-feedback"] = cmd->add_option("--error-feedback", f->error_feedback,
                                        "on|off: feed each push's quantization error into the "
                                        "next (global, or with --tensor for its override)");
  o["ema-decay"] = cmd->add_option("--ema-decay", f->ema_decay, "EMA decay in [0, 1)");
  o["push-codec"] = cmd->add_option("--push-codec", f->push_codec,
                                    "codec workers -> servers, e.g. e4m3/block128");
  o["pull-codec"] =
      cmd->add_option("--pull-codec", f->pull_codec, "codec servers -> workers, e.g. bf16");
  o["drift"] =
      cmd->add_option("--drift", f->drift, "early-refresh drift threshold (>= 0; 0 disables)");
  o["margin"] = cmd->add_option("--margin", f->margin, "selection margin in [0, 1)");
  o["selection"] = cmd->add_option("--selection", f->selection, "selection mode: measured|list");
  o["include"] = cmd->add_option("--include", f->include,
                                 "tensor-name glob to include (repeatable; replaces the list)");
  o["exclude"] = cmd->add_option("--exclude", f->exclude,
                                 "tensor-name glob to exclude (repeatable; replaces the list)");
}

absl::StatusOr<v1::CodecSpec> ParseCodec(const std::string& flag, const std::string& text) {
  absl::StatusOr<codec::CodecSpec> spec = codec::ParseCodecSpec(text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", spec.status().message()));
  }
  return codec::ToProto(*spec);
}

absl::StatusOr<PolicyEdit> ToPolicyEdit(const PolicyFlags& f) {
  PolicyEdit e;
  e.tensor_glob = f.tensor;
  if (f.given("tensor") && f.tensor.empty()) {
    return absl::InvalidArgumentError("--tensor needs a nonempty glob");
  }
  if (f.given("period")) e.period_steps = f.period;
  if (f.given("rank")) e.rank = f.rank;
  if (f.given("power")) e.powers = f.powers;
  if (f.given("sides")) {
    absl::StatusOr<v1::Sides> v = ParseSides(f.sides);
    if (!v.ok()) return v.status();
    e.sides = *v;
  }
  if (f.given("source")) {
    absl::StatusOr<v1::GeometrySource> v = ParseSource(f.source);
    if (!v.ok()) return v.status();
    e.source = *v;
  }
  if (f.given("residual")) {
    absl::StatusOr<v1::ResidualModel> v = ParseResidual(f.residual);
    if (!v.ok()) return v.status();
    e.residual = *v;
  }
  if (f.given("enabled")) {
    if (f.enabled != "true" && f.enabled != "false") {
      return absl::InvalidArgumentError("--enabled takes true or false");
    }
    e.enabled = f.enabled == "true";
  }
  if (f.given("error-feedback")) {
    if (f.error_feedback != "on" && f.error_feedback != "off") {
      return absl::InvalidArgumentError("--error-feedback takes on or off");
    }
    e.error_feedback = f.error_feedback == "on";
  }
  if (f.given("ema-decay")) e.ema_decay = f.ema_decay;
  if (f.given("push-codec")) {
    absl::StatusOr<v1::CodecSpec> v = ParseCodec("--push-codec", f.push_codec);
    if (!v.ok()) return v.status();
    e.push_codec = *v;
  }
  if (f.given("pull-codec")) {
    absl::StatusOr<v1::CodecSpec> v = ParseCodec("--pull-codec", f.pull_codec);
    if (!v.ok()) return v.status();
    e.pull_codec = *v;
  }
  if (f.given("drift")) e.drift_threshold = f.drift;
  if (f.given("margin")) e.margin = f.margin;
  if (f.given("selection")) {
    absl::StatusOr<v1::SelectionMode> v = ParseSelection(f.selection);
    if (!v.ok()) return v.status();
    e.selection = *v;
  }
  if (f.given("include")) e.include = f.include;
  if (f.given("exclude")) e.exclude = f.exclude;
  if (e.empty()) return absl::InvalidArgumentError("nothing to change; see policy set --help");
  if (absl::Status valid = ValidatePolicyEdit(e); !valid.ok()) return valid;
  return e;
}

int RunOrThrow(const std::vector<std::string>& args, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err) {
  CLI::App app{"giftctl: the operator CLI of the GIFT-PS coordinator.", "giftctl"};
  app.require_subcommand(1, 1);
  app.fallthrough();
  app.footer(
      "Exit codes: 0 ok, 1 the coordinator refused the request (its code and message are "
      "printed), 64 usage error, 69 coordinator (or health TARGET) unavailable or not serving, "
      "75 deadline exceeded or retryable failure.\nRun giftctl COMMAND --help for the options of "
      "each command.");
  ConnectionFlags connection = DefaultConnectionFlags(default_coordinator);
  const std::string& address = connection.address;
  bool as_json = false;
  AddConnectionFlags(app, &connection);
  app.add_flag("--json", as_json, "print JSON instead of tables");

  CLI::App* status = app.add_subcommand("status", "cluster summary: epoch, members, tensors");
  CLI::App* members = app.add_subcommand("members", "workers and servers with ranks and leases");
  CLI::App* tensors =
      app.add_subcommand("tensors", "registered tensors, their owners and basis versions");
  CLI::App* policy = app.add_subcommand("policy", "show or change the refresh policy");
  policy->require_subcommand(1, 1);
  CLI::App* policy_get = policy->add_subcommand("get", "print the policy");
  CLI::App* policy_set = policy->add_subcommand(
      "set", "change the given fields of the policy (or of one tensor override)");
  PolicyFlags policy_flags;
  AddPolicyFlags(policy_set, &policy_flags);
  CLI::App* refresh = app.add_subcommand("refresh", "ask the basis owners to refresh now");
  std::string refresh_glob;
  refresh->add_option("--tensor", refresh_glob, "only tensors whose names match this glob");
  CLI::App* rank = app.add_subcommand("rank", "change the approximation rank r");
  rank->require_subcommand(1, 1);
  CLI::App* rank_set =
      rank->add_subcommand("set", "set r (globally or for a glob) and refresh the tensors");
  uint32_t rank_value = 0;
  std::string rank_glob;
  rank_set->add_option("R", rank_value, "the new rank r (>= 1)")
      ->required()
      ->check(CLI::Range(1u, 1u << 20));
  rank_set->add_option("--tensor", rank_glob, "only tensors whose names match this glob");
  CLI::App* drain = app.add_subcommand("drain", "drain a worker: it leaves after its step");
  std::string drain_target;
  drain->add_option("WORKER", drain_target, "the member's name or id")->required();
  CLI::App* health = app.add_subcommand(
      "health", "grpc.health.v1 status of a daemon's endpoint (exec probes under mutual TLS)");
  std::string health_target;
  health->add_option("TARGET", health_target, "HOST:PORT or unix:/path (default: the coordinator)");
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script: source <(giftctl completion bash)");
  std::string shell;
  completion->add_option("SHELL", shell, "the shell (bash)")
      ->required()
      ->check(CLI::IsMember({"bash"}));

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // --help prints the help of the (sub)command and exits 0.
    return app.exit(e, out, err) == 0 ? kExitOk : kExitUsage;
  }

  std::optional<PolicyEdit> edit;
  if (policy_set->parsed()) {
    absl::StatusOr<PolicyEdit> parsed = ToPolicyEdit(policy_flags);
    if (!parsed.ok()) {
      err << "giftctl policy set: " << parsed.status().message() << '\n';
      return kExitUsage;
    }
    edit = *std::move(parsed);
  }

  if (completion->parsed()) {
    out << BashCompletionScript(app);
    return kExitOk;
  }

  const std::string target = health->parsed() && !health_target.empty() ? health_target : address;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(connection, target);
  if (!channel.ok()) {
    err << "giftctl: " << channel.status().message() << '\n';
    return kExitUsage;
  }
  if (health->parsed()) {
    const absl::Status serving = CheckHealth(*channel, connection.timeout, out);
    if (!serving.ok()) err << "giftctl health " << target << ": " << serving << '\n';
    return ExitCodeFor(serving);
  }
  const CoordinatorClient client(*std::move(channel), connection.timeout);
  const Context ctx{client, as_json, out};
  absl::Status result;
  if (status->parsed()) {
    result = Status(ctx, address);
  } else if (members->parsed()) {
    result = Members(ctx);
  } else if (tensors->parsed()) {
    result = Tensors(ctx);
  } else if (policy_get->parsed()) {
    result = PolicyGet(ctx);
  } else if (policy_set->parsed()) {
    result = PolicySet(ctx, *edit);
  } else if (refresh->parsed()) {
    result = Refresh(ctx, refresh_glob);
  } else if (rank_set->parsed()) {
    result = RankSet(ctx, rank_value, rank_glob);
  } else if (drain->parsed()) {
    result = Drain(ctx, drain_target);
  }
  if (result.ok()) return kExitOk;
  err << "giftctl: " << absl::StatusCodeToString(result.code()) << ": " << result.message();
  if (absl::IsUnavailable(result)) err << " (is the coordinator running at " << address << "?)";
  err << '\n';
  return ExitCodeFor(result);
}

}  // namespace

int Run(const std::vector<std::string>& args, const std::string& default_coordinator,
        std::ostream& out, std::ostream& err) {
  try {
    return RunOrThrow(args, default_coordinator, out, err);
  } catch (const std::exception& e) {
    err << "giftctl: internal error: " << e.what() << '\n';
  } catch (...) {
    err << "giftctl: internal error: unknown exception\n";
  }
  return kExitError;
}

}  // namespace gift::giftctl
