// giftctl tensors.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/output.h"
#include "tools/giftctl/policy_edit.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;
using nlohmann::json;

namespace {

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

// The member names by id, for tables that show owners.
std::map<std::string, std::string> NamesById(const v1::ClusterState& state) {
  std::map<std::string, std::string> names;
  for (const v1::Member& m : state.workers()) names[m.member_id()] = m.name();
  for (const v1::Member& m : state.servers()) names[m.member_id()] = m.name();
  return names;
}

std::string VersionText(const v1::BasisVersion& v) {
  return absl::StrCat("v", v.version(), v.direct() ? " direct" : absl::StrCat(" r", v.rank()), " @",
                      v.activation_step());
}

// A version's own codecs (the fidelity target's choice), "-": the policy's.
std::string VersionCodecs(const v1::BasisVersion& v) {
  if (v.push_codec().format() == v1::ELEMENT_FORMAT_UNSPECIFIED) return "-";
  return absl::StrCat(CodecName(v.push_codec()), " / ", CodecName(v.pull_codec()));
}

std::string Bytes(double bytes) {
  if (bytes >= 1e6) return absl::StrFormat("%.2fM", bytes / 1e6);
  if (bytes >= 1e3) return absl::StrFormat("%.1fk", bytes / 1e3);
  return absl::StrFormat("%.0f", bytes);
}

}  // namespace

absl::Status TensorsCommand(const CommandContext& ctx) {
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
  Table t({"ID", "NAME", "SHAPE", "DTYPE", "CHUNKS", "OWNER", "ACTIVE", "PENDING", "RATIO",
           "CHOICE", "CODECS", "BYTES/STEP (TARGET)", "ERROR (TARGET)"});
  // Under the fidelity target: the owners' measured bytes per step, chosen
  // and at the target codecs, over the tensors that report them.
  double bytes_chosen = 0, bytes_target = 0;
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
    std::string owner = "-", active = "-", pending = "-", ratio = "-", choice = "-", codecs = "-",
                bytes = "-", error = "-";
    if (basis != nullptr) {
      const auto name = names.find(basis->owner_member_id());
      owner = name == names.end() ? Or(basis->owner_member_id()) : name->second;
      if (!basis->versions().empty()) {
        active = VersionText(basis->versions(basis->versions_size() - 1));
        codecs = VersionCodecs(basis->versions(basis->versions_size() - 1));
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
        // The owner's last selection and why (the step budget's cut shows
        // as "(budget)").
        if (!r.choice().empty()) choice = r.choice();
        if (r.target_bytes_per_step() > 0) {
          bytes =
              absl::StrCat(Bytes(r.bytes_per_step()), " (", Bytes(r.target_bytes_per_step()), ")");
          error = absl::StrFormat("%.4f (%.4f)", r.error(), r.target_error());
          bytes_chosen += r.bytes_per_step();
          bytes_target += r.target_bytes_per_step();
        }
      }
    }
    t.Add({absl::StrCat(info.tensor_id()), info.name(), absl::StrJoin(info.shape(), "x"),
           DTypeName(info.dtype()), absl::StrCat(chunks[info.tensor_id()]), owner, active, pending,
           ratio, choice, codecs, bytes, error});
  }
  if (ctx.json) {
    ctx.out << j.dump(2) << '\n';
  } else {
    t.Print(ctx.out);
    if (bytes_target > 0) {
      ctx.out << absl::StrFormat(
          "fidelity target: %s bytes per step per worker against %s at the target codecs "
          "(%.1f %% saved)\n",
          Bytes(bytes_chosen), Bytes(bytes_target), 100.0 * (1.0 - bytes_chosen / bytes_target));
    }
  }
  return absl::OkStatus();
}

}  // namespace gift::giftctl
