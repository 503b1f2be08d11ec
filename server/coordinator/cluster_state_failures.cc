// ClusterStateMachine's handling of peer failure reports (see cluster_state.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/cluster_state_run.h"

namespace gift::coordinator {

absl::StatusOr<gift::v1::ReportPeerFailureResponse> ClusterStateMachine::ReportPeerFailure(
    const gift::v1::ReportPeerFailureRequest& request, bool confirmed) {
  return Run([&]() -> absl::StatusOr<gift::v1::ReportPeerFailureResponse> {
    const std::string& suspect = request.suspect_member_id();
    if (suspect.empty()) return absl::InvalidArgumentError("suspect_member_id is empty");
    if (suspect == request.reporter_member_id()) {
      return absl::InvalidArgumentError("a member cannot report itself failed");
    }
    GIFT_RETURN_IF_ERROR(membership_.Live(request.reporter_member_id()).status());
    gift::v1::ReportPeerFailureResponse response;
    if (!membership_.members().contains(suspect)) {  // already gone
      response.set_epoch(membership_.epoch());
      return response;
    }
    if (!confirmed) {
      gift::logging::Log(gift::logging::Level::kInfo, "peer_failure_unconfirmed",
                         {{"reporter", request.reporter_member_id()},
                          {"suspect", suspect},
                          {"reason", request.reason()}});
      return absl::FailedPreconditionError(
          absl::StrCat("not confirmed: member ", suspect,
                       " is still connected to the coordinator; not evicted"));
    }
    gift::logging::Log(gift::logging::Level::kWarning, "peer_failure_confirmed",
                       {{"reporter", request.reporter_member_id()},
                        {"suspect", suspect},
                        {"reason", request.reason()}});
    membership_.Remove(suspect, "fail", NowMsLocked());
    OnMembershipChangedLocked();
    response.set_evicted(true);
    response.set_epoch(membership_.epoch());
    return response;
  });
}

absl::StatusOr<std::vector<std::string>> ClusterStateMachine::EvictAwaitedDisconnected(
    absl::FunctionRef<bool(const std::string&)> disconnected) {
  return Run([&]() -> absl::StatusOr<std::vector<std::string>> {
    // The steps in progress (each live worker's begun, uncompleted step):
    // the newest, whose worker, and the newest of any other worker, so that
    // "another worker is in a step above m's last" is one comparison per m.
    size_t in_step = 0;
    uint64_t newest = 0, runner_up = 0;
    std::string newest_worker;
    for (const auto& [id, m] : membership_.members()) {
      if (!IsWorker(m) || m.waiting_step() <= m.last_step()) continue;
      ++in_step;
      if (m.waiting_step() > newest) {
        runner_up = newest;
        newest = m.waiting_step();
        newest_worker = id;
      } else {
        runner_up = std::max(runner_up, m.waiting_step());
      }
    }
    std::vector<std::string> evicted;
    if (in_step == 0) return evicted;
    for (const auto& [id, m] : membership_.members()) {
      bool awaited = false;
      if (IsWorker(m)) {
        if (membership_.IsJoining(id)) continue;
        awaited = (id == newest_worker ? runner_up : newest) > m.last_step();
      } else {
        awaited = m.role() == gift::v1::MEMBER_ROLE_SERVER;
      }
      if (awaited && disconnected(id)) evicted.push_back(id);
    }
    for (const std::string& id : evicted) {
      gift::logging::Log(gift::logging::Level::kWarning, "awaited_member_disconnected",
                         {{"member_id", id}, {"waiting_workers", in_step}});
      membership_.Remove(id, "disconnect", NowMsLocked());
    }
    if (!evicted.empty()) OnMembershipChangedLocked();
    return evicted;
  });
}

}  // namespace gift::coordinator
