// ClusterStateMachine::StartRun: a new training run of the job
// (coordinator.proto StartRun, cluster.proto RunState).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/run_clients.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/cluster_state_run.h"

namespace gift::coordinator {

using logging::Level;
using logging::Log;

namespace {
constexpr size_t kMaxRunIdBytes = 256;
}  // namespace

absl::StatusOr<gift::v1::StartRunResponse> ClusterStateMachine::StartRun(
    const gift::v1::StartRunRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::StartRunResponse> {
    if (request.run_id().empty()) return absl::InvalidArgumentError("run_id is empty");
    if (request.run_id().size() > kMaxRunIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("run_id is ", request.run_id().size(), " bytes; at most ", kMaxRunIdBytes));
    }
    if (!request.member_id().empty()) {
      GIFT_RETURN_IF_ERROR(membership_.LiveWorker(request.member_id()).status());
    }
    gift::v1::StartRunResponse response;
    if (request.run_id() != meta_.run.run_id()) {
      StartRunLocked(request.run_id(),
                     request.member_id().empty() ? "operator" : request.member_id(), &response);
    }
    *response.mutable_run() = meta_.run;
    response.set_revision(meta_.revision);
    return response;
  });
}

void ClusterStateMachine::StartRunLocked(const std::string& run_id, const std::string& by,
                                         gift::v1::StartRunResponse* response) {
  gift::v1::RunState run;
  run.set_run_id(run_id);
  run.set_generation(meta_.run.generation() + 1);
  // Above every step a worker may have begun: steps are planned only
  // through the frozen horizon (a worker beyond it first moves it).
  uint64_t begun = meta_.frozen_through_step;
  for (const auto& [id, m] : membership_.members()) {
    begun = std::max({begun, m.last_step(), m.waiting_step()});
  }
  run.set_base_step(begun + 1);
  run.set_started_unix_ms(NowMsLocked());
  meta_.run = run;
  // The new run registers its tensors again, in whatever shapes it has;
  // refusals of the old run's registrations no longer hold.
  for (const std::string& name : registry_.DropAll()) response->add_dropped_tensors(name);
  ledger_.DropAll();
  for (const auto& [id, m] : membership_.members()) {
    if (m.registration_error().empty()) continue;
    gift::v1::Member* member = membership_.Live(id).value();
    member->clear_registration_error();
    membership_.MarkChanged(*member);
  }
  // A new epoch: servers drop what they hold of the old run's steps.
  membership_.BumpEpoch();
  OnMembershipChangedLocked();
  TouchLocked();
  response->set_started(true);
  Log(Level::kInfo, "run_started",
      {{"run_id", run.run_id()},
       {"generation", run.generation()},
       {"base_step", run.base_step()},
       {"epoch", membership_.epoch()},
       {"dropped_tensors", response->dropped_tensors_size()},
       {"by", by}});
}

bool ClusterStateMachine::RunClientsLeftLocked() const {
  bool any = false;
  for (const auto& [id, m] : membership_.members()) {
    if (!rpc::ReportsClientOfRun(m, meta_.run.generation())) continue;
    if (m.client().connected()) return false;
    any = true;
  }
  return any;
}

void ClusterStateMachine::NoteClientLocked(gift::v1::Member* member,
                                           const gift::v1::TrainingClient& client) {
  if (client.registration() == 0) return;
  if (member->has_client()) {
    const gift::v1::TrainingClient& known = member->client();
    // An older registration's report is stale; a registration reported gone
    // does not come back (a beat built before the close may arrive after it).
    if (client.registration() < known.registration()) return;
    if (client.registration() == known.registration() &&
        (client.connected() || !known.connected())) {
      return;
    }
  }
  *member->mutable_client() = client;
  membership_.MarkChanged(*member);
  TouchLocked();
  if (!client.connected()) {
    Log(Level::kInfo, "training_client_left",
        {{"member_id", member->member_id()},
         {"name", member->name()},
         {"rank", member->rank()},
         {"run_generation", client.run_generation()},
         {"run_clients_left", RunClientsLeftLocked()}});
  }
}

}  // namespace gift::coordinator
