// Node-local aggregation (docs/design.md section 6.7; Policy.hierarchy =
// HIERARCHY_NODE): the workers of one node (Member.node) form a node group;
// each chunk of a step has one leader among them (round robin over the
// chunks); the other members send the leader their chunk in FP32
// (kNodeMember), the leader sums the group's chunks in FP32 in rank order,
// encodes the sum in the tensor's push codec and pushes it to the chunk's
// server as one contribution for the whole group (kNodePush); the server
// sends the result to every rank, as without node groups.
//
//   auto group = NodeGroupOf(state, my_rank);        // null: push directly
//   if (group && group->LeaderOf(t, c) == my_rank) { ... lead ... }
//
// NodeSums is the leader's side for one step: which chunks it leads, the
// members' contributions that arrived (possibly before the leader planned
// the chunk), and the FP32 sum once all are in.
//
// Thread safety: NodeGroup is an immutable value; NodeSums is used from one
// thread (the engine's Run thread).
#ifndef GIFT_WORKER_ENGINE_NODE_GROUP_H_
#define GIFT_WORKER_ENGINE_NODE_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/dataplane/chunk_header.h"
#include "gift/v1/cluster.pb.h"

namespace gift::worker {

struct NodeGroup {
  uint32_t self = 0;                   // this worker's rank
  std::vector<uint32_t> ranks;         // the group's ranks, ascending (self included)
  std::vector<std::string> addresses;  // their data-plane addresses, in that order

  size_t size() const { return ranks.size(); }
  // The leader of (tensor, chunk): ranks[(tensor_id + chunk_index) mod size],
  // the same on every member, spreading a tensor's chunks over the group.
  uint32_t LeaderOf(uint64_t tensor_id, uint32_t chunk_index) const;
  // The data-plane address of `rank` (a member of the group).
  const std::string& AddressOf(uint32_t rank) const;
};

// The node group of the worker of rank `rank` in `state` when the policy's
// hierarchy is NODE and its node (non-empty) has other workers; null
// otherwise (every chunk pushed directly, as with hierarchy NONE).
std::shared_ptr<const NodeGroup> NodeGroupOf(const gift::v1::ClusterState& state, uint32_t rank);

// A member's chunk received by its leader.
struct NodeContribution {
  dataplane::ChunkHeader header;      // kind kNodeMember
  std::vector<uint8_t> header_bytes;  // as received (sealed, with authentication)
  std::vector<uint8_t> payload;       // an FP32 codec payload
};

class NodeSums {
 public:
  using Key = std::pair<uint64_t, uint32_t>;  // (tensor id, chunk index)

  // Forgets the previous step (its contributions too).
  void Reset(std::shared_ptr<const NodeGroup> group);
  const std::shared_ptr<const NodeGroup>& group() const { return group_; }

  // This worker leads `key`: its own chunk is `elements` FP32 values at
  // `own` (valid until the sum is taken); `cookie` is the caller's.
  void Lead(const Key& key, const float* own, uint64_t elements, size_t cookie);
  bool Leads(const Key& key) const { return led_.contains(key); }
  // Files a member's contribution of this step. InvalidArgument (dropped):
  // not a member of the group, this worker's own rank, the chunk is led by
  // another rank, or a duplicate.
  absl::Status Offer(NodeContribution contribution);

  // The led chunks whose every member's contribution is in and whose sum
  // has not been taken, in the order they were led.
  std::vector<Key> Ready() const;
  // Writes the group's FP32 sum of `key` (Ready) into `out` (resized to its
  // elements), in rank order, and marks it taken; returns the caller's
  // cookie.
  // InvalidArgument / DataLoss: a malformed or mis-shaped contribution.
  absl::StatusOr<size_t> TakeSum(const Key& key, std::vector<float>& out,
                                 const codec::CodecOptions& options);

 private:
  struct Led {
    const float* own = nullptr;
    uint64_t elements = 0;
    size_t cookie = 0;
    bool taken = false;
    size_t order = 0;
  };
  std::shared_ptr<const NodeGroup> group_;
  absl::flat_hash_map<Key, Led> led_;
  // By chunk: the members' contributions so far (rank, payload).
  absl::flat_hash_map<Key, std::vector<NodeContribution>> received_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_NODE_GROUP_H_
