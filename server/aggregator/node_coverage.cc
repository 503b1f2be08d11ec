#include "server/aggregator/node_coverage.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace gift::server {

using dataplane::ChunkHeader;
using dataplane::ChunkKind;

NodeGroups NodeGroups::FromNodes(absl::Span<const std::string> nodes) {
  NodeGroups out;
  absl::flat_hash_map<std::string, uint32_t> index;
  out.group_.resize(nodes.size());
  uint32_t next = 0;
  for (size_t r = 0; r < nodes.size(); ++r) {
    if (nodes[r].empty()) {
      out.group_[r] = next++;
      continue;
    }
    auto [it, added] = index.try_emplace(nodes[r], next);
    if (added) ++next;
    out.group_[r] = it->second;
  }
  return out;
}

std::vector<uint32_t> NodeGroups::GroupOf(uint32_t rank) const {
  if (rank >= group_.size()) return {rank};
  std::vector<uint32_t> ranks;
  for (uint32_t r = 0; r < group_.size(); ++r) {
    if (group_[r] == group_[rank]) ranks.push_back(r);
  }
  return ranks;
}

absl::StatusOr<uint32_t> NodeGroups::Cover(const ChunkHeader& header,
                                           absl::Span<uint8_t> covered) const {
  if (header.rank >= covered.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataplane::ToString(header), ": rank outside the world"));
  }
  if (header.kind == ChunkKind::kPush) {
    if (covered[header.rank] != 0) {
      return absl::AlreadyExistsError(
          absl::StrCat(dataplane::ToString(header), ": rank already contributed"));
    }
    covered[header.rank] = 1;
    return 1;
  }
  if (header.kind != ChunkKind::kNodePush) {
    return absl::InvalidArgumentError(absl::StrCat("not a push: ", dataplane::ToString(header)));
  }
  const std::vector<uint32_t> group = GroupOf(header.rank);
  if (header.ranks_summed() != group.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataplane::ToString(header), ": a node sum of ", header.ranks_summed(),
                     " ranks, the sender's node has ", group.size(), " in this epoch"));
  }
  for (uint32_t r : group) {
    if (r >= covered.size() || covered[r] != 0) {
      return absl::AlreadyExistsError(absl::StrCat(dataplane::ToString(header), ": rank ", r,
                                                   " of the node was already counted"));
    }
  }
  for (uint32_t r : group) covered[r] = 1;
  return static_cast<uint32_t>(group.size());
}

}  // namespace gift::server
