// The second job of the ResultInbox (result_inbox.h), on its own: the node
// group's contributions held for a leader (docs/design.md section 6.7). A
// member of the node group sends this worker, the leader of some chunks,
// its FP32 chunk (kNodeMember) whenever its rows are ready, which may be
// before the leader has opened that step; they are held here, bounded in
// bytes, until the leader takes those of its step (NodeLeaderRoute), and
// dropped once their epoch has ended. Arrivals are counted, so that a
// leader waiting for results also wakes for a contribution (unseen()).
// The connections of the other workers of the group are kept too: their
// failure ends their epoch, not the step by itself (StepPlan::node).
//
//   if (!held.Hold(header, message, open_epoch)) ++stray;  // transport thread
//   held.DropEpochsBefore(epoch);                          // a step opens
//   for (NodeContribution& c : held.Take(epoch, step)) ...  // the leader
//
// Thread safety: none; the ResultInbox holds it under its mutex.
#ifndef GIFT_WORKER_ENGINE_NODE_CONTRIBUTIONS_H_
#define GIFT_WORKER_ENGINE_NODE_CONTRIBUTIONS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/dataplane/chunk_header.h"
#include "common/transport/transport.h"
#include "worker/engine/node_group.h"

namespace gift::worker {

class NodeContributions {
 public:
  // Contributions held for later steps, at most (a member runs at most a
  // step or two ahead of its leader; beyond this they are dropped).
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{256} << 20;

  explicit NodeContributions(uint64_t max_bytes = kDefaultMaxBytes) : max_bytes_(max_bytes) {}

  // Holds the member's chunk `header` (kNodeMember) with `message`'s bytes
  // (moved out of it, or copied from where they were placed), of this step
  // or a later one. False (nothing held: a stray) when it is of an epoch
  // below `open_epoch` (the step in flight's, if any), or would pass the
  // byte bound.
  bool Hold(const dataplane::ChunkHeader& header, transport::Message& message,
            std::optional<uint64_t> open_epoch);
  // Drops the contributions of epochs below `epoch`: they will never be
  // summed (a step of `epoch` opened).
  void DropEpochsBefore(uint64_t epoch);
  // Takes those of (epoch, step), in arrival order; every arrival so far
  // counts as seen.
  std::vector<NodeContribution> Take(uint64_t epoch, uint64_t step);

  // Whether something arrived (or Wake was called) since the last Take or
  // MarkSeen.
  bool unseen() const { return arrivals_ != seen_; }
  void MarkSeen() { seen_ = arrivals_; }
  // Makes unseen() true: a node step opened, and what is already held for
  // it is to be filed at the leader's next wait.
  void Wake() { ++arrivals_; }

  // The other workers of the node group this one sends to.
  void AddMate(transport::PeerId peer) { mates_.insert(peer); }
  // Whether `peer` was one (then forgotten: it failed).
  bool ForgetMate(transport::PeerId peer) { return mates_.erase(peer) > 0; }
  bool IsMate(transport::PeerId peer) const { return mates_.contains(peer); }

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return held_.size(); }

 private:
  const uint64_t max_bytes_;
  std::vector<NodeContribution> held_;
  uint64_t bytes_ = 0;
  uint64_t arrivals_ = 0;
  uint64_t seen_ = 0;
  absl::flat_hash_set<transport::PeerId> mates_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_NODE_CONTRIBUTIONS_H_
