// giftctl status, giftctl members.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/control/member_text.h"
#include "common/dataplane/chunk_header.h"
#include "common/rpc/member_role.h"
#include "nlohmann/json.hpp"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/output.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;
using nlohmann::json;

namespace {

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

// "rank 2 (worker-2, m5 on node-b)", or the id of a worker not in `state`.
std::string DescribeWorker(const v1::ClusterState& state, const std::string& member_id) {
  const v1::Member* m = control::FindMember(state, member_id);
  return m != nullptr ? control::DescribeMember(*m) : member_id;
}

// "step 41 for 12.3 s on rank 2 (worker-2, m5 on node-b)"; "-" when no
// worker has begun a step another has not completed.
// The epoch's data-plane MAC (ClusterState.dataplane_mac); "off" when the
// coordinator names none.
std::string DataPlaneMacText(v1::MacAlgorithm mac) {
  if (mac == v1::MAC_ALGORITHM_UNSPECIFIED) return "off";
  const std::optional<dataplane::MacAlgorithm> known =
      dataplane::MacAlgorithmOf(static_cast<uint32_t>(mac));
  return known.has_value() ? dataplane::MacAlgorithmName(*known)
                           : absl::StrCat("unknown (", static_cast<int>(mac), ")");
}

std::string WaitingText(const v1::StatusResponse& status) {
  if (status.max_begun_step() < status.slowest_step()) return "-";
  const std::string head = absl::StrFormat("step %d for %.1f s", status.slowest_step(),
                                           static_cast<double>(status.slowest_wait_ms()) / 1000.0);
  if (status.slowest_member_ids().empty()) {
    return absl::StrCat(head, ": every rank began it (waiting for the servers)");
  }
  std::vector<std::string> who;
  for (const std::string& id : status.slowest_member_ids()) {
    who.push_back(DescribeWorker(status.state(), id));
  }
  return absl::StrCat(head, " on ", absl::StrJoin(who, ", "));
}

}  // namespace

absl::Status StatusCommand(const CommandContext& ctx, const std::string& address) {
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
              {"dataplane_mac", DataPlaneMacText(s.dataplane_mac())},
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
              {"max_step", status->max_step()},
              {"max_begun_step", status->max_begun_step()}};
    j["waiting_for"] = json::array();
    if (status->max_begun_step() >= status->slowest_step()) {
      for (const std::string& id : status->slowest_member_ids()) {
        const v1::Member* m = control::FindMember(s, id);
        if (m == nullptr) continue;
        j["waiting_for"].push_back({{"rank", m->rank()},
                                    {"name", m->name()},
                                    {"member_id", m->member_id()},
                                    {"node", m->node()},
                                    {"last_step", m->last_step()}});
      }
    }
    ctx.out << j.dump(2) << '\n';
    return absl::OkStatus();
  }
  Table t({"FIELD", "VALUE"});
  t.Add({"coordinator", absl::StrCat(address, " (version ", Or(status->version()), ", up ",
                                     Millis(uptime_ms), ")")});
  t.Add({"cluster", Or(s.cluster_id())});
  t.Add({"revision", absl::StrCat(s.revision())});
  t.Add({"epoch", absl::StrCat(s.epoch())});
  t.Add({"data-plane MAC", DataPlaneMacText(s.dataplane_mac())});
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
  for (const v1::Member& m : s.workers()) {
    if (m.registration_error().empty()) continue;
    t.Add({"refused", absl::StrCat(control::DescribeMember(m), ": ", m.registration_error())});
  }
  t.Print(ctx.out);
  return absl::OkStatus();
}

absl::Status MembersCommand(const CommandContext& ctx) {
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
      t.Add({std::string(rpc::MemberRoleName(m.role())), absl::StrCat(m.rank()), m.name(),
             m.member_id(), StateName(m.state()),
             absl::StrCat(m.last_step(), m.waiting_step() > m.last_step()
                                             ? absl::StrCat(" (in ", m.waiting_step(), ")")
                                             : ""),
             Millis(m.lease_expires_unix_ms() - status->now_unix_ms()),
             absl::StrCat(m.joined_epoch()), Or(m.control_address())});
    }
  }
  ctx.out << "epoch " << s.epoch() << ", " << s.workers_size() << " workers, " << s.servers_size()
          << " servers\n";
  t.Print(ctx.out);
  return absl::OkStatus();
}

}  // namespace gift::giftctl
