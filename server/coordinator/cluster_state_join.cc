// ClusterStateMachine's join path and the admission of workers joining a
// cluster that has stepped (see cluster_state.h, "Admission").
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/cluster_state_run.h"

namespace gift::coordinator {

using gift::logging::Level;
using gift::logging::Log;

namespace {
// JoinRequest.dataplane_macs: a build knows two; more is not a member's.
constexpr int kMaxDataPlaneMacs = 8;
}  // namespace

bool ClusterStateMachine::StartedLocked() const {
  // Not the horizon: it persists across jobs, and the workers of a new job on
  // an old state file must all join at once (the start barrier waits for
  // them). A restarted coordinator relearns the steps from the next beats.
  return membership_.stepped();
}

absl::StatusOr<gift::v1::JoinResponse> ClusterStateMachine::Join(
    const gift::v1::JoinRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::JoinResponse> {
    if (request.name().empty()) return absl::InvalidArgumentError("name is empty");
    if (request.role() != gift::v1::MEMBER_ROLE_WORKER &&
        request.role() != gift::v1::MEMBER_ROLE_SERVER) {
      return absl::InvalidArgumentError(
          absl::StrCat("role ", request.role(), " is not WORKER or SERVER"));
    }
    if (const gift::v1::Member* m = membership_.FindByName(request.name()); m != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("a live member named '", request.name(), "' exists (", m->member_id(),
                       "); it must leave or let its lease expire before the name can join again"));
    }
    if (request.dataplane_macs_size() > kMaxDataPlaneMacs) {
      return absl::InvalidArgumentError(absl::StrCat("dataplane_macs names ",
                                                     request.dataplane_macs_size(),
                                                     " MACs; at most ", kMaxDataPlaneMacs));
    }
    gift::v1::Member member;
    member.set_name(request.name());
    member.set_role(request.role());
    member.set_state(gift::v1::MEMBER_STATE_ACTIVE);
    member.set_data_address(request.data_address());
    member.set_control_address(request.control_address());
    member.set_node(request.node());
    *member.mutable_dataplane_macs() = request.dataplane_macs();
    member.set_lease_expires_unix_ms(absl::ToUnixMillis(clock_->Now() + options_.lease_ttl));
    gift::v1::JoinResponse response;
    std::string id;
    if (IsWorker(member) && StartedLocked()) {
      // The cluster has stepped: the worker is admitted at the first step
      // nobody may have started yet, and waits outside the world until every
      // member worker has completed the steps below it (design.md 6.1).
      const uint64_t admit_step = meta_.frozen_through_step + 1;
      id = membership_.AddJoining(std::move(member), admit_step).member_id();
      Log(Level::kInfo, "member_joining",
          {{"member_id", id}, {"name", request.name()}, {"admit_step", admit_step}});
      response.set_admit_step(admit_step);
      MarkDirtyLocked();  // the member id counter
      if (membership_.JoinerReady()) OnMembershipChangedLocked();  // no member worker
    } else {
      id = membership_.Add(std::move(member)).member_id();
      OnMembershipChangedLocked();
      membership_.Record("join", *membership_.Live(id).value(), NowMsLocked());
    }
    const gift::v1::Member& joined = *membership_.Live(id).value();
    // A joiner starts at the cluster's progress: it must acknowledge pending
    // proposals, and until it heartbeats it does not hold up pruning.
    response.set_member_id(id);
    response.set_admitted(!membership_.IsJoining(id));
    if (response.admitted()) response.set_rank(joined.rank());
    response.set_epoch(membership_.epoch());
    response.set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
    *response.mutable_state() = BuildStateLocked();
    return response;
  });
}

}  // namespace gift::coordinator
