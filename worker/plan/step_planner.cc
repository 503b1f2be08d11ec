#include "worker/plan/step_planner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "common/dataplane/state_view.h"
#include "worker/engine/node_group.h"

namespace gift::worker {

const gift::v1::TensorBasisState* FindBasisState(const gift::v1::ClusterState& state,
                                                 uint64_t tensor_id) {
  for (const gift::v1::TensorBasisState& b : state.bases()) {
    if (b.tensor_id() == tensor_id) return &b;
  }
  return nullptr;
}

const gift::v1::BasisVersion* ActiveVersion(const gift::v1::TensorBasisState& basis,
                                            uint64_t step) {
  const gift::v1::BasisVersion* active = nullptr;
  for (const gift::v1::BasisVersion& v : basis.versions()) {
    if (v.activation_step() > step) continue;
    if (active == nullptr || v.activation_step() > active->activation_step() ||
        (v.activation_step() == active->activation_step() && v.version() > active->version())) {
      active = &v;
    }
  }
  return active;
}

uint64_t WorkerSetOf(const gift::v1::ClusterState& state) {
  std::vector<std::pair<uint32_t, absl::string_view>> workers;
  for (const gift::v1::Member& w : state.workers()) workers.emplace_back(w.rank(), w.member_id());
  std::sort(workers.begin(), workers.end());
  return absl::HashOf(workers);
}

absl::StatusOr<StepPlan> PlanStep(const gift::v1::ClusterState& state, absl::string_view member_id,
                                  uint64_t step, const std::vector<LocalTensor>& tensors,
                                  const BasisLookup& lookup) {
  const gift::v1::Member* self = nullptr;
  for (const gift::v1::Member& w : state.workers()) {
    if (w.member_id() == member_id) self = &w;
  }
  if (self == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_id, " is not a worker of epoch ", state.epoch()));
  }
  auto view = dataplane::StateViewOf(state);
  if (!view.ok()) return view.status();
  if (step > state.frozen_through_step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, " is above the frozen schedule (through step ",
                     state.frozen_through_step(), ")"));
  }
  absl::flat_hash_map<uint32_t, const std::string*> servers;
  for (const gift::v1::Member& s : state.servers()) {
    if (!s.data_address().empty()) servers[s.rank()] = &s.data_address();
  }
  absl::flat_hash_map<uint64_t, const gift::v1::TensorBasisState*> bases;
  for (const gift::v1::TensorBasisState& b : state.bases()) bases[b.tensor_id()] = &b;

  StepPlan plan{.epoch = state.epoch(),
                .step = step,
                .rank = self->rank(),
                .world_size = static_cast<uint32_t>(state.workers_size()),
                .worker_set = WorkerSetOf(state)};
  plan.node = NodeGroupOf(state, self->rank());  // hierarchy NODE (node_group.h)
  for (const LocalTensor& local : tensors) {
    auto found = view->tensors.find(local.tensor_id);
    if (found == view->tensors.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", local.tensor_id, " ('", local.name, "') is not registered yet"));
    }
    const dataplane::TensorView& info = found->second;
    if (info.info->num_elements() != local.rows * local.cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", local.name, "' has ", info.info->num_elements(),
                       " elements in the cluster, ", local.rows * local.cols, " locally"));
    }
    if (info.chunks.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", local.name, "' has no chunks in the shard map yet"));
    }
    TensorStep t{.tensor_id = local.tensor_id,
                 .rows = local.rows,
                 .cols = local.cols,
                 .data = local.data,
                 .device = local.device,
                 .push_spec = info.push_spec,
                 .error_feedback = info.settings.transform.error_feedback()};
    t.rotation_block = info.settings.transform.rotation_block();
    t.chunks.reserve(info.chunks.size());
    for (const dataplane::ChunkView& c : info.chunks) {
      auto server = servers.find(c.chunk->server_rank());
      if (server == servers.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "chunk ", c.chunk->index(), " of tensor ", local.tensor_id, " is mapped to shard ",
            c.chunk->server_rank(), ", which has no live server"));
      }
      t.chunks.push_back({.index = c.chunk->index(),
                          .offset = c.chunk->offset(),
                          .num_elements = c.chunk->num_elements(),
                          .server = *server->second});
    }
    auto basis = bases.find(local.tensor_id);
    const gift::v1::BasisVersion* active =
        basis == bases.end() ? nullptr : ActiveVersion(*basis->second, step);
    if (active != nullptr) {
      t.basis_version = active->version();
      if (active->push_codec().format() != gift::v1::ELEMENT_FORMAT_UNSPECIFIED) {
        // The owner's choice under the fidelity target (checked by the
        // coordinator when it was published).
        auto spec = codec::FromProto(active->push_codec());
        if (!spec.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("tensor '", local.name, "' version ",
                                                         active->version(),
                                                         " push codec: ", spec.status().message()));
        }
        t.push_spec = *spec;
      }
      if (!active->direct()) {
        auto transform = lookup(local.tensor_id, active->version());
        if (!transform.ok()) return transform.status();
        t.transform = *std::move(transform);
      }
    }
    plan.tensors.push_back(std::move(t));
  }
  return plan;
}

}  // namespace gift::worker
