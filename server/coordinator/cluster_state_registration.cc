// ClusterStateMachine's registration of tensors (coordinator.proto
// RegisterTensors): checked whole first, then added with their owners and
// shard map; a training client's registration may start a new run first
// (RunClientsLeftLocked, cluster_state_training_run.cc).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/policy/policy.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/cluster_state_run.h"
#include "server/coordinator/shard_map.h"

namespace gift::coordinator {

using gift::logging::Level;
using gift::logging::Log;

absl::Status ClusterStateMachine::CheckRegistrationLocked(
    const gift::v1::RegisterTensorsRequest& request, const TensorRegistry& registry) {
  if (!request.member_id().empty()) {
    GIFT_RETURN_IF_ERROR(membership_.Live(request.member_id()).status());
  }
  GIFT_ASSIGN_OR_RETURN(std::vector<const gift::v1::TensorSpec*> fresh, registry.Check(request));
  // The policy's ranks must still make sense with the new tensors.
  absl::Status ranks = policy::ValidateRanksForTensors(meta_.policy, registry.Shapes(fresh));
  if (!ranks.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the policy does not fit these tensors: ", ranks.message(),
                     "; change it (giftctl policy set --rank R, or giftctl rank set R, "
                     "with R at most the smallest dimension) and register again"));
  }
  return absl::OkStatus();
}

void ClusterStateMachine::NoteRegistrationLocked(const std::string& member_id,
                                                 const absl::Status& outcome) {
  if (member_id.empty()) return;
  absl::StatusOr<gift::v1::Member*> m = membership_.LiveWorker(member_id);
  if (!m.ok() || membership_.IsJoining(member_id)) return;
  const std::string error = outcome.ok() ? "" : outcome.ToString();
  if ((*m)->registration_error() == error) return;
  (*m)->set_registration_error(error);
  membership_.MarkChanged(**m);
  TouchLocked();
  if (!outcome.ok()) {
    Log(Level::kWarning, "registration_refused",
        {{"member_id", member_id},
         {"name", (*m)->name()},
         {"rank", (*m)->rank()},
         {"error", error}});
  }
}

absl::StatusOr<gift::v1::RegisterTensorsResponse> ClusterStateMachine::RegisterTensors(
    const gift::v1::RegisterTensorsRequest& request) {
  return Run([&]() -> absl::StatusOr<gift::v1::RegisterTensorsResponse> {
    // A training script started again without a run id, after every client
    // of the current run has gone: a new run, as a new id would start.
    const bool new_run = request.new_run_when_clients_left() &&
                         membership_.LiveWorker(request.member_id()).ok() &&
                         RunClientsLeftLocked();
    // Everything is checked first: a request is applied whole or not at all.
    const TensorRegistry none;
    const absl::Status checked = CheckRegistrationLocked(request, new_run ? none : registry_);
    NoteRegistrationLocked(request.member_id(), checked);
    GIFT_RETURN_IF_ERROR(checked);
    gift::v1::RegisterTensorsResponse response;
    if (new_run) {
      gift::v1::StartRunResponse started;
      StartRunLocked(absl::StrCat("auto-", meta_.run.generation() + 1),
                     absl::StrCat(request.member_id(), " (every client of run '",
                                  meta_.run.run_id(), "' had left)"),
                     &started);
      response.set_run_started(true);
    }
    std::vector<gift::v1::TensorInfo> added;
    for (const gift::v1::TensorSpec& spec : request.tensors()) {
      const gift::v1::TensorInfo* known = registry_.FindByName(spec.name());
      if (known == nullptr) {
        known = &registry_.Add(spec, meta_.next_tensor_id++);
        ledger_.AddTensor(known->tensor_id());
        added.push_back(*known);
      }
      *response.add_tensors() = *known;
    }
    if (!added.empty()) {
      AssignOwnersLocked();
      meta_.shard_map =
          ExtendShardMap(meta_.shard_map, added, membership_.Count(gift::v1::MEMBER_ROLE_SERVER));
      TouchLocked();
      Log(Level::kInfo, "tensors_registered",
          {{"count", added.size()}, {"total", registry_.tensors().size()}});
    }
    *response.mutable_shard_map() = meta_.shard_map;
    *response.mutable_run() = meta_.run;
    if (request.client_registration() > 0) {
      absl::StatusOr<gift::v1::Member*> m = membership_.LiveWorker(request.member_id());
      if (m.ok()) {
        gift::v1::TrainingClient client;
        client.set_registration(request.client_registration());
        client.set_run_generation(meta_.run.generation());
        client.set_connected(true);
        NoteClientLocked(*m, client);
      }
    }
    response.set_revision(meta_.revision);
    return response;
  });
}

}  // namespace gift::coordinator
