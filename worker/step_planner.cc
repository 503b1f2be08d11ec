#include "worker/step_planner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/policy.h"
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
  if (state.shard_map().epoch() != state.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard map of epoch ", state.shard_map().epoch(), " in a state of epoch ", state.epoch()));
  }
  if (step > state.frozen_through_step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, " is above the frozen schedule (through step ",
                     state.frozen_through_step(), ")"));
  }
  const gift::v1::Policy policy = policy::WithDefaults(state.policy());
  absl::flat_hash_map<uint32_t, const std::string*> servers;
  for (const gift::v1::Member& s : state.servers()) {
    if (!s.data_address().empty()) servers[s.rank()] = &s.data_address();
  }
  absl::flat_hash_map<uint64_t, const gift::v1::TensorInfo*> infos;
  for (const gift::v1::TensorInfo& t : state.tensors()) infos[t.tensor_id()] = &t;
  absl::flat_hash_map<uint64_t, const gift::v1::TensorBasisState*> bases;
  for (const gift::v1::TensorBasisState& b : state.bases()) bases[b.tensor_id()] = &b;
  absl::flat_hash_map<uint64_t, std::vector<ChunkRoute>> routes;
  for (const gift::v1::Chunk& c : state.shard_map().chunks()) {
    auto server = servers.find(c.server_rank());
    if (server == servers.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", c.index(), " of tensor ", c.tensor_id(), " is mapped to shard ",
                       c.server_rank(), ", which has no live server"));
    }
    routes[c.tensor_id()].push_back({.index = c.index(),
                                     .offset = c.offset(),
                                     .num_elements = c.num_elements(),
                                     .server = *server->second});
  }

  StepPlan plan{.epoch = state.epoch(),
                .step = step,
                .rank = self->rank(),
                .world_size = static_cast<uint32_t>(state.workers_size()),
                .worker_set = WorkerSetOf(state)};
  plan.node = NodeGroupOf(state, self->rank());  // hierarchy NODE (node_group.h)
  for (const LocalTensor& local : tensors) {
    auto info = infos.find(local.tensor_id);
    if (info == infos.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor ", local.tensor_id, " ('", local.name, "') is not registered yet"));
    }
    if (info->second->num_elements() != local.rows * local.cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", local.name, "' has ", info->second->num_elements(),
                       " elements in the cluster, ", local.rows * local.cols, " locally"));
    }
    auto chunks = routes.find(local.tensor_id);
    if (chunks == routes.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", local.name, "' has no chunks in the shard map yet"));
    }
    // The tensor's codec, resolved as the servers resolve its pull codec.
    const policy::TensorSettings settings =
        policy::ResolveTensorSettings(policy, info->second->name(), info->second->shape());
    auto push_spec = codec::FromProto(settings.transform.push_codec());
    if (!push_spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("policy push codec of tensor '", local.name,
                                                     "': ", push_spec.status().message()));
    }
    TensorStep t{.tensor_id = local.tensor_id,
                 .rows = local.rows,
                 .cols = local.cols,
                 .data = local.data,
                 .device = local.device,
                 .chunks = chunks->second,
                 .push_spec = *push_spec,
                 .error_feedback = settings.transform.error_feedback()};
    t.rotation_block = settings.transform.rotation_block();
    auto basis = bases.find(local.tensor_id);
    const gift::v1::BasisVersion* active =
        basis == bases.end() ? nullptr : ActiveVersion(*basis->second, step);
    if (active != nullptr) {
      t.basis_version = active->version();
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
