// ClusterStateMachine's handling of peer failure reports (see cluster_state.h).
#include <string>

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

}  // namespace gift::coordinator
