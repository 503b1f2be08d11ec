// The membership part of the coordinator's state machine: the live members
// (workers and servers) with their leases and reported steps, the epoch, the
// member id counter, dense ranks, and the membership history, plus the
// changes to them not yet committed to the StateStore.
//
// Semantics (the state machine's contract, cluster_state.h):
//   - Epoch: +1 for every Add and Remove; the caller then calls Rerank.
//   - Ranks (Rerank): dense 0..N-1 per role. A member keeps its rank while
//     it is below the new count; the holes are refilled from the members
//     whose rank is out of range, in rank order, then in join order.
//   - Member ids are "m<seq>" with seq counting up from 1 over the cluster's
//     life; an id below the counter that is not live left or expired.
//   - Pending changes: every mutation here records what to write (TakeChanges
//     moves them into a StoreMutation); a lease renewal or step report
//     (Renew) records nothing by itself (MarkChanged does).
//   - Joining workers (AddJoining): a worker that joins a cluster that has
//     stepped waits, with a lease, outside members() (no rank, no epoch
//     change, not stored) until it is admitted at its admit step: AdmitReady
//     moves it in (+1 epoch) once every member worker has reported
//     admit_step - 1, or when there is no member worker.
//
// Ownership: owns its members; pointers it returns stay valid until the next
// Add, Remove or Reset.
// Thread safety: none (thread-compatible): the state machine guards it with
// its own lock.
#ifndef GIFT_SERVER_COORDINATOR_MEMBERSHIP_H_
#define GIFT_SERVER_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gift/v1/cluster.pb.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {

bool IsWorker(const gift::v1::Member& member);

class Membership {
 public:
  // Replaces everything with a stored state (no pending changes).
  void Reset(uint64_t epoch, uint64_t next_member_seq, std::vector<gift::v1::Member> members);

  uint64_t epoch() const { return epoch_; }
  uint64_t next_member_seq() const { return next_member_seq_; }
  const std::map<std::string, gift::v1::Member>& members() const { return members_; }

  // The live member `member_id` (a joining one too): InvalidArgument for an empty id,
  // FailedPrecondition for one that left, expired or failed (for an expired
  // or failed worker: "evicted at step S (its lease expired | a peer reported
  // it failed), cluster at step T"), NotFound
  // otherwise.
  absl::StatusOr<gift::v1::Member*> Live(const std::string& member_id);
  // Live and a worker (FailedPrecondition for a server).
  absl::StatusOr<gift::v1::Member*> LiveWorker(const std::string& member_id);
  // The live member named `name` (a joining one too), or null.
  gift::v1::Member* FindByName(absl::string_view name);

  // Adds `member` (name, role, addresses, lease, state set by the caller)
  // with the next id, no rank yet, joined at the new epoch (+1). Records no
  // event: the caller records "join" once the member is ranked.
  gift::v1::Member& Add(gift::v1::Member member);
  // Adds a joining worker (as Add, but outside members()) admitted at
  // `admit_step`; no epoch change.
  gift::v1::Member& AddJoining(gift::v1::Member member, uint64_t admit_step);
  bool IsJoining(const std::string& member_id) const { return joining_.contains(member_id); }
  // The lowest admit step of the joining workers; false when none.
  bool MinAdmitStep(uint64_t* admit_step) const;
  // Whether AdmitReady would admit someone now.
  bool JoinerReady() const;
  // Moves the ready joining workers into members() (+1 epoch each, joined at
  // that epoch, last step admit_step - 1, no rank yet); returns their ids.
  // The caller re-ranks and records "join" for each.
  std::vector<std::string> AdmitReady();
  // Removes a live member, +1 epoch (none for a joining one), records `event` ("leave", "expire",
  // "fail": a confirmed peer failure report, "disconnect": its connection
  // died while a step waited for it, ...); no-op for an unknown id.
  // An expired or failed worker is remembered for Live's message.
  void Remove(const std::string& member_id, absl::string_view event, int64_t now_ms);
  // +1 epoch with the same members (a change every member must apply at an
  // epoch boundary: the policy's hierarchy).
  void BumpEpoch() { ++epoch_; }
  // The ids (joining ones too) whose lease ends at or before `now_ms`.
  std::vector<std::string> Expired(int64_t now_ms) const;
  // Re-ranks both roles and marks every member changed.
  void Rerank();
  uint32_t Count(gift::v1::MemberRole role) const;

  // The lowest next step of the workers (last_step + 1) and their highest
  // last step; false when there are no workers.
  bool WorkerSteps(uint64_t* min_next_step, uint64_t* max_last_step) const;
  std::set<std::string> WorkerIds() const;

  // Whether the job has stepped (see Semantics); NoteStepped records that a
  // member worker reported a completed step.
  bool stepped() const { return stepped_; }
  void NoteStepped() { stepped_ = true; }

  // Records a history event for `member` (and logs it).
  void Record(absl::string_view event, const gift::v1::Member& member, int64_t now_ms);
  // The member's current record is to be written (not for a joining one).
  void MarkChanged(const gift::v1::Member& member);

  // Copies the pending changes into `mutation` (put/delete members, history);
  // ClearChanges once the commit succeeded.
  void AddChangesTo(StoreMutation* mutation) const;
  void ClearChanges();

 private:
  void RerankRole(gift::v1::MemberRole role);
  // Clears stepped_ when no worker is left, member or joining.
  void ForgetStepsWithoutWorkers();

  uint64_t epoch_ = 0;
  uint64_t next_member_seq_ = 1;
  std::map<std::string, gift::v1::Member> members_;  // by member id
  std::map<std::string, gift::v1::Member> joining_;  // by member id, not stored
  std::map<std::string, gift::v1::Member> put_members_;
  std::set<std::string> delete_members_;
  std::vector<MembershipEvent> history_;
  bool stepped_ = false;
  // The last step of workers whose lease expired or who failed, and the
  // event (in memory, at most kMaxEvicted), for Live's message to a
  // returning one.
  struct Eviction {
    uint64_t step = 0;
    std::string event;
  };
  static constexpr size_t kMaxEvicted = 1024;
  std::map<std::string, Eviction> evicted_at_step_;
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_MEMBERSHIP_H_
