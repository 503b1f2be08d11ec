#include "server/aggregator/reducer_slots.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::server::reducer_internal {

using dataplane::ChunkHeader;

StepInputs& OpenStep(ChunkState& chunk, uint64_t step, uint32_t world_size) {
  auto it = chunk.steps.find(step);
  if (it != chunk.steps.end()) return *it->second;
  std::unique_ptr<StepInputs> inputs;
  if (!chunk.spare.empty()) {
    inputs = std::move(chunk.spare.back());
    chunk.spare.pop_back();
  } else {
    inputs = std::make_unique<StepInputs>();
  }
  inputs->step = step;
  inputs->received = 0;
  inputs->slots.resize(world_size);
  inputs->covered.assign(world_size, 0);
  StepInputs& ref = *inputs;
  chunk.steps.emplace(step, std::move(inputs));
  return ref;
}

void RecycleIfUnused(ChunkState& chunk, uint64_t step) {
  auto it = chunk.steps.find(step);
  if (it == chunk.steps.end() || it->second->received > 0) return;
  for (const Slot& slot : it->second->slots) {
    if (slot.state != Slot::State::kEmpty) return;
  }
  chunk.spare.push_back(std::move(it->second));
  chunk.steps.erase(it);
}

absl::Status CheckVersion(const ChunkHeader& header, const StepInputs& inputs) {
  if (inputs.received > 0 && inputs.basis_version != header.basis_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        dataplane::ToString(header), ": basis version ", header.basis_version,
        " differs from version ", inputs.basis_version, " of the ranks already received"));
  }
  return absl::OkStatus();
}

codec::EncodedView CopyIntoSlot(Slot& slot, const std::vector<uint8_t>& payload,
                                const codec::EncodedView& view,
                                const std::shared_ptr<BufferRegistry>& registry) {
  slot.buffer.Resize(payload.size(), registry);
  std::memcpy(slot.buffer.data(), payload.data(), payload.size());
  codec::EncodedView moved = view;
  const auto rebase = [&](const uint8_t* p) {
    return p == nullptr ? nullptr : slot.buffer.data() + (p - payload.data());
  };
  moved.codes = rebase(view.codes);
  moved.scales = rebase(view.scales);
  return moved;
}

void EndOpenSteps(ChunkState& chunk, uint64_t tensor_id, uint32_t chunk_index, uint64_t epoch,
                  uint32_t world_size, EndedSteps& ended, uint64_t below) {
  for (auto it = chunk.steps.begin(); it != chunk.steps.end();) {
    const uint64_t step = it->first;
    if (step >= below) {
      ++it;
      continue;
    }
    StepInputs& inputs = *it->second;
    if (inputs.received > 0) {
      if (ended.aborted != nullptr) {
        ChunkHeader h;
        h.kind = dataplane::ChunkKind::kAbort;
        h.epoch = epoch;
        h.step = step;
        h.tensor_id = tensor_id;
        h.chunk_index = chunk_index;
        h.basis_version = inputs.basis_version;
        h.set_ranks_summed(inputs.received);
        h.world_size = world_size;
        h.status_code = static_cast<uint32_t>(absl::StatusCode::kAborted);
        ended.aborted->push_back(h);
      }
      if (ended.incomplete != nullptr) ended.incomplete->Add(step, inputs.covered);
      ++ended.pushed_steps;
    }
    for (Slot& slot : inputs.slots) {
      if (slot.state == Slot::State::kPlaced) {
        ended.orphans->push_back(std::move(slot.buffer));  // the transport may still write it
      } else if (slot.state == Slot::State::kReceived) {
        ended.received_bytes += slot.buffer.size();
      }
      slot.state = Slot::State::kEmpty;
    }
    inputs.received = 0;
    chunk.spare.push_back(std::move(it->second));
    chunk.steps.erase(it++);
  }
}

void UnregisterBuffers(ChunkState& chunk) {
  const auto unregister = [](StepInputs& inputs) {
    for (Slot& slot : inputs.slots) slot.buffer.Unregister();
  };
  for (auto& [step, inputs] : chunk.steps) unregister(*inputs);
  for (auto& inputs : chunk.spare) unregister(*inputs);
  for (auto& result : chunk.results) result->Unregister();
}

}  // namespace gift::server::reducer_internal
