// giftctl refresh, giftctl rank set, giftctl drain: the requests that change
// what the cluster does.
#include <string>

#include "absl/strings/str_join.h"
#include "common/rpc/member_role.h"
#include "nlohmann/json.hpp"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/output.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;
using nlohmann::json;

absl::Status RefreshCommand(const CommandContext& ctx, const std::string& glob) {
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

absl::Status RankSetCommand(const CommandContext& ctx, uint32_t rank, const std::string& glob) {
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

absl::Status DrainCommand(const CommandContext& ctx, const std::string& worker) {
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
  ctx.out << "draining " << rpc::MemberRoleName(m.role()) << " " << m.name() << " (" << m.member_id()
          << ", rank " << m.rank() << "); it leaves after its current step\n";
  return absl::OkStatus();
}

}  // namespace gift::giftctl
