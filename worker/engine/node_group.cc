#include "worker/engine/node_group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/codec/payload.h"
#include "common/policy/policy.h"

namespace gift::worker {

uint32_t NodeGroup::LeaderOf(uint64_t tensor_id, uint32_t chunk_index) const {
  return ranks[(tensor_id + chunk_index) % ranks.size()];
}

const std::string& NodeGroup::AddressOf(uint32_t rank) const {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  return addresses[static_cast<size_t>(it - ranks.begin())];
}

std::shared_ptr<const NodeGroup> NodeGroupOf(const gift::v1::ClusterState& state, uint32_t rank) {
  if (policy::WithDefaults(state.policy()).hierarchy() != gift::v1::HIERARCHY_NODE) return nullptr;
  const gift::v1::Member* self = nullptr;
  for (const gift::v1::Member& w : state.workers()) {
    if (w.rank() == rank) self = &w;
  }
  if (self == nullptr || self->node().empty()) return nullptr;
  std::vector<const gift::v1::Member*> mates;
  for (const gift::v1::Member& w : state.workers()) {
    if (w.node() == self->node()) mates.push_back(&w);
  }
  if (mates.size() < 2) return nullptr;
  std::sort(mates.begin(), mates.end(), [](const gift::v1::Member* a, const gift::v1::Member* b) {
    return a->rank() < b->rank();
  });
  auto group = std::make_shared<NodeGroup>();
  group->self = rank;
  for (const gift::v1::Member* m : mates) {
    group->ranks.push_back(m->rank());
    group->addresses.push_back(m->data_address());
  }
  return group;
}

void NodeSums::Reset(std::shared_ptr<const NodeGroup> group) {
  group_ = std::move(group);
  led_.clear();
  received_.clear();
}

void NodeSums::Lead(const Key& key, const float* own, uint64_t elements, size_t cookie) {
  led_[key] = Led{.own = own, .elements = elements, .cookie = cookie, .order = led_.size()};
}

absl::Status NodeSums::Offer(NodeContribution c) {
  const dataplane::ChunkHeader& h = c.header;
  if (group_ == nullptr || h.rank == group_->self ||
      !std::binary_search(group_->ranks.begin(), group_->ranks.end(), h.rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataplane::ToString(h), ": not from a member of this node group"));
  }
  if (group_->LeaderOf(h.tensor_id, h.chunk_index) != group_->self) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataplane::ToString(h), ": this worker does not lead the chunk"));
  }
  std::vector<NodeContribution>& got = received_[{h.tensor_id, h.chunk_index}];
  for (const NodeContribution& g : got) {
    if (g.header.rank == h.rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(dataplane::ToString(h), ": a second contribution of the rank"));
    }
  }
  got.push_back(std::move(c));
  return absl::OkStatus();
}

std::vector<NodeSums::Key> NodeSums::Ready() const {
  std::vector<std::pair<size_t, Key>> ready;
  for (const auto& [key, led] : led_) {
    if (led.taken) continue;
    auto it = received_.find(key);
    const size_t got = it == received_.end() ? 0 : it->second.size();
    if (got + 1 == group_->size()) ready.emplace_back(led.order, key);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<Key> out;
  for (const auto& [order, key] : ready) out.push_back(key);
  return out;
}

absl::StatusOr<size_t> NodeSums::TakeSum(const Key& key, std::vector<float>& out,
                                         const codec::CodecOptions& options) {
  auto led = led_.find(key);
  if (led == led_.end() || led->second.taken) {
    return absl::InvalidArgumentError("no such chunk to sum");
  }
  out.resize(led->second.elements);
  std::vector<NodeContribution>& got = received_[key];
  std::sort(got.begin(), got.end(), [](const NodeContribution& a, const NodeContribution& b) {
    return a.header.rank < b.header.rank;
  });
  std::fill(out.begin(), out.end(), 0.0f);
  bool own_added = false;
  auto add_own = [&] {
    for (size_t i = 0; i < out.size(); ++i) out[i] += led->second.own[i];
    own_added = true;
  };
  for (const NodeContribution& c : got) {
    if (!own_added && c.header.rank > group_->self) add_own();
    auto parsed = codec::ParsePayload(c.payload);
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(), absl::StrCat(dataplane::ToString(c.header), ": ",
                                                               parsed.status().message()));
    }
    if (parsed->view.rows * parsed->view.cols != out.size()) {
      return absl::InvalidArgumentError(absl::StrCat(dataplane::ToString(c.header), ": ",
                                                     parsed->view.rows * parsed->view.cols,
                                                     " elements, the chunk has ", out.size()));
    }
    if (auto s = codec::DecodeAccumulate(parsed->view, out.data(), options); !s.ok()) return s;
  }
  if (!own_added) add_own();
  led->second.taken = true;
  received_.erase(key);
  return led->second.cookie;
}

}  // namespace gift::worker
