// Which ranks a push counts for, under node-local aggregation
// (docs/design.md section 6.7): a kPush counts for its rank; a kNodePush
// from a leader counts for every rank of the leader's node group in the
// epoch, and must say so (its header's ranks_summed() is the group's size).
// A (step, chunk) counts each rank once: a contribution that overlaps ranks
// already counted is refused, whichever came first.
//
//   NodeGroups groups = NodeGroups::FromNodes({"a", "a", "b", "b"});
//   std::vector<uint8_t> covered(4, 0);
//   auto n = groups.Cover(node_push_from_rank_2_of_2, covered);  // 2; ranks 2, 3
//
// Thread safety: an immutable value; Cover writes only `covered`.
#ifndef GIFT_SERVER_AGGREGATOR_NODE_COVERAGE_H_
#define GIFT_SERVER_AGGREGATOR_NODE_COVERAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dataplane/chunk_header.h"

namespace gift::server {

class NodeGroups {
 public:
  // Every rank its own group (no node information).
  NodeGroups() = default;
  // `nodes` by rank (ClusterState workers' Member.node): ranks with the same
  // non-empty node form a group; an empty node is a group of its own.
  static NodeGroups FromNodes(absl::Span<const std::string> nodes);

  // The ranks of `rank`'s group, ascending ({rank} without node information).
  std::vector<uint32_t> GroupOf(uint32_t rank) const;

  // Marks the ranks `header` (kPush or kNodePush, rank below covered.size())
  // counts for in `covered` (by rank, 0 / 1) and returns how many. Errors,
  // with `covered` unchanged: AlreadyExists (a rank already counted),
  // InvalidArgument (a kNodePush whose rank count is not its group's size,
  // another kind).
  absl::StatusOr<uint32_t> Cover(const dataplane::ChunkHeader& header,
                                 absl::Span<uint8_t> covered) const;

 private:
  std::vector<uint32_t> group_;  // by rank: its group's index
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_NODE_COVERAGE_H_
