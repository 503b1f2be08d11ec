// The push-pull engine's record of the step in flight, and the one place
// that state shared with the transport's threads lives: which step is in
// flight and whether it was aborted, the servers it pushes to, the chunks
// it waits for and those arrived, the sends in flight, and (its second job,
// a class of its own: node_contributions.h) the node group's contributions
// held for a leader. It places results straight into their chunks'
// slots (PlacePayload), files them as they arrive (OnMessage), and hands
// them to the Run thread to decode (Take).
//
//   inbox.Open(epoch, step, run, keys);
//   inbox.UseServer(peer, address);           // each connection the step uses
//   inbox.Expect(slots, timeout);              // the step's chunks, before pushing
//   ... inbox.SendStarted / SendEnded around each send (ChunkSender) ...
//   while (!inbox.complete()) inbox.Take(/*wait=*/true, deadline, ready);
//   inbox.Close(slots);
//
// A result counts only when it is a kResult of the step in flight, for a
// chunk it waits for, not yet arrived, and (with keys) sealed by a server of
// the epoch; anything else is counted as a stray or an authentication
// failure and dropped; the exception is a step given up for a newer epoch,
// whose retry may complete with that epoch's results (EarlierAttempt,
// below). An abort from a server, a failed connection the step
// uses, a failed send of the step, AbortEpochsBefore and AbortStep end the
// step (Take returns the reason) unless every result is already in.
//
// Ownership: the slots are the engine's (TensorBuffers); the inbox keeps
// pointers to the step's slots between Expect and Close, and to slots with a
// placement outstanding until it is delivered, so a slot must outlive both
// (ChunkSlot::Busy). Thread safety: every method may be called from any
// thread; Open, Expect, Take, Close and the node-contribution methods are
// the Run thread's (one step at a time).
#ifndef GIFT_WORKER_ENGINE_RESULT_INBOX_H_
#define GIFT_WORKER_ENGINE_RESULT_INBOX_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/dataplane/chunk_mac.h"
#include "common/transport/transport.h"
#include "worker/engine/node_contributions.h"
#include "worker/engine/node_group.h"

namespace gift::worker {

struct ChunkSlot;
class TensorBuffers;

class ResultInbox {
 public:
  ResultInbox() = default;
  ResultInbox(const ResultInbox&) = delete;
  ResultInbox& operator=(const ResultInbox&) = delete;

  // The step's lifecycle (Run thread).
  // Opens step `step` of `epoch`; `run` tells a retry of (epoch, step)
  // apart. Results and aborts are checked with `keys` (null: off).
  // `node_step`: the step aggregates in a node group (Take then wakes for
  // the members' contributions).
  void Open(uint64_t epoch, uint64_t step, uint64_t run,
            std::shared_ptr<const dataplane::EpochKeys> keys, bool node_step);
  // Records that the step sends to the server at `address` through `peer`
  // (its failure then ends the step). Unavailable when `peer` was already
  // reported failed.
  absl::Status UseServer(transport::PeerId peer, const std::string& address);
  // Records that `peer` is another worker of the node group: its failure
  // ends its epoch, not the step (StepPlan::node).
  void UseNodeMate(transport::PeerId peer);
  // Adds `slots` (of the step's tensors, tensor_id and index set) to the
  // chunks the step waits for, once none of them is being sent any more
  // (their payloads are rewritten next). False when an earlier send is still
  // in flight after `timeout`.
  bool Expect(absl::Span<ChunkSlot* const> slots, absl::Duration timeout);
  // Those of `slots` whose send is still in flight to a peer that the step
  // in flight does not use (UseServer, UseNodeMate): a server of an ended
  // epoch. Such a send holds its slot's buffer until the peer takes it,
  // which a stopped or cut-off server never does (Expect would wait for it
  // until its timeout).
  std::vector<ChunkSlot*> StalledSends(absl::Span<ChunkSlot* const> slots) const;
  // Stops waiting for the sends in flight from `buffers`, which moved to a
  // fresh arena (TensorBuffers::RenewSendArena): they no longer hold their
  // slot for Expect, but keep it Busy (and `buffers` not Idle) until they
  // end.
  void DetachSends(TensorBuffers& buffers);
  // Every send DetachSends stopped waiting for from `buffers` has ended.
  bool DetachedSendsEnded(TensorBuffers& buffers) const;
  // Every chunk of the step is expected (Finish: no more Expect). From now
  // on the step may complete with the results of an earlier epoch's attempt
  // at it (see EarlierAttempt below).
  void ExpectNoMore();
  // Moves the arrived results into `ready` (cleared first). With `wait`,
  // first waits until `deadline` for an arrival, the step's end, an abort or
  // a node contribution. False on timeout; the abort's status when the step
  // was aborted before its last result arrived.
  absl::StatusOr<bool> Take(bool wait, absl::Time deadline, std::vector<ChunkSlot*>& ready);
  // Every expected result arrived and was taken.
  bool complete() const;
  size_t missing() const;  // results not arrived
  // The abort, when the step was aborted before its last result arrived.
  absl::Status IncompleteAbort() const;
  // Whether a push left for a server this step.
  bool pushed() const;
  // Why the step in flight was aborted; OK when it was not.
  absl::Status aborted() const;
  // Ends the step (later results are strays) and returns those of `slots`
  // whose result was too big to be placed and that are no longer busy.
  std::vector<ChunkSlot*> Close(absl::Span<ChunkSlot* const> slots);

  // Sends (ChunkSender). `slot` (may be null: an owned payload) is being
  // sent to `peer`; `to_server`: a push of the step left for a server.
  // Returns the send's serial, for SendEnded.
  uint64_t SendStarted(ChunkSlot* slot, transport::PeerId peer, bool to_server);
  // The send `serial` to `peer` ended with `done`; when it failed while the
  // step of `run` is in flight and not yet aborted, SendFailure(peer, what,
  // ...) aborts it.
  void SendEnded(ChunkSlot* slot, uint64_t serial, uint64_t run, transport::PeerId peer,
                 const absl::Status& done, absl::string_view what);
  // Unavailable "<what>: <why>", naming the server when `peer` is one the
  // step uses (AggregatorFailure).
  absl::Status SendFailure(transport::PeerId peer, absl::string_view what,
                           absl::string_view why) const;
  // Waits up to `timeout` for every send to end.
  void AwaitSends(absl::Duration timeout);
  // No send from `buffers` and no placement into them is in flight.
  bool Idle(const TensorBuffers& buffers) const;

  // The node group's contributions (Run thread; Open drops those of
  // earlier epochs, and with `node_step` the next Take wakes to file those
  // held for the step). Takes the contributions of (epoch, step) received so far.
  std::vector<NodeContribution> TakeNodeContributions(uint64_t epoch, uint64_t step);
  void CountStray();
  void CountAuthFailure(dataplane::AuthFailure failure);

  // The transport's callbacks (its progress thread).
  absl::Span<uint8_t> PlacePayload(absl::Span<const uint8_t> header, size_t bytes);
  void OnMessage(transport::Message message);
  void OnPeerFailure(transport::PeerId peer, const absl::Status& why);

  // Any thread. Aborts the step in flight if its epoch is below `epoch`
  // (Aborted with `why`), or whatever its epoch (`why`, not OK); nothing
  // when it is already aborted. A step of an epoch below the one of
  // AbortEpochsBefore's last call opens aborted: a step planned from a state
  // that a newer one replaced before the step opened (two epochs a
  // millisecond apart) would otherwise wait out its timeout for results
  // its servers, already in the newer epoch, never send.
  void AbortEpochsBefore(uint64_t epoch, absl::string_view why);
  void AbortStep(absl::Status why);
  // Messages received that belonged to no step in flight (late, duplicate
  // or foreign).
  uint64_t stray_messages() const;
  // Server connections the transport reported failed, and how many of
  // those ended a step (the others were not used by the step in flight).
  uint64_t peer_failures() const;
  uint64_t peer_failures_that_aborted() const;
  // Results and aborts of the step in flight dropped by authentication, by
  // dataplane::AuthFailureName (every reason present).
  std::map<std::string, uint64_t> auth_failures() const;
  // What this inbox dropped since it was made, for an error about results
  // that never came: "dropped so far: 3 stray, 2 unauthenticated (unknown_key
  // 2)"; "" when nothing.
  std::string DroppedSoFar() const;
  // Steps completed with the results of an earlier epoch's attempt.
  uint64_t earlier_epoch_completions() const;

 private:
  // A step this worker gave up only because it saw a newer epoch
  // (AbortEpochsBefore) before all its results came. Its servers may still
  // have completed it in its own epoch; then every other worker has its
  // results and goes on to the next step, and the retry under the new epoch
  // would wait for pushes nobody makes. So the inbox keeps taking that
  // step's results (checked with its epoch's keys), and the retry of the same
  // step completes with them once every chunk it expects has one and none of
  // its own results came. Each chunk's result or abort goes to every worker
  // of the epoch, so either every worker can complete the step in the old
  // epoch or none can: an abort of any of its chunks drops the attempt.
  struct EarlierAttempt {
    uint64_t epoch = 0;
    uint64_t step = 0;
    std::shared_ptr<const dataplane::EpochKeys> keys;
    absl::flat_hash_set<std::pair<uint64_t, uint32_t>> chunks;  // (tensor id, index)
    absl::flat_hash_map<std::pair<uint64_t, uint32_t>, std::vector<uint8_t>> results;
  };
  // Close's part: keeps the attempt when it was given up for a newer epoch.
  void KeepEarlierAttemptLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnMessage's part for a result or abort of the earlier attempt.
  void FileEarlierLocked(const dataplane::ChunkHeader& header, transport::Message& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the step in flight with the earlier attempt's results when it
  // can (above).
  void AdoptEarlierAttemptLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void CountAuthFailureLocked(dataplane::AuthFailure failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborts the step in flight (step_ of epoch_) for a newer epoch, `why`.
  void AbortForNewerEpochLocked(absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SendFailureLocked(transport::PeerId peer, absl::string_view what,
                                 absl::string_view why) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;  // a step is in flight
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t run_ ABSL_GUARDED_BY(mu_) = 0;
  bool node_step_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const dataplane::EpochKeys> keys_ ABSL_GUARDED_BY(mu_);
  // The servers' connections the step uses, with their addresses.
  absl::flat_hash_map<transport::PeerId, std::string> servers_ ABSL_GUARDED_BY(mu_);
  bool pushed_ ABSL_GUARDED_BY(mu_) = false;
  // (tensor id, chunk index) -> the slot, for the chunks the step waits for.
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, ChunkSlot*> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<ChunkSlot*> ready_ ABSL_GUARDED_BY(mu_);  // arrived, not yet taken
  size_t remaining_ ABSL_GUARDED_BY(mu_) = 0;           // expected, not arrived
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);           // non-OK once aborted
  bool aborted_for_newer_epoch_ ABSL_GUARDED_BY(mu_) = false;  // by AbortEpochsBefore
  // The epoch of AbortEpochsBefore's last call (the latest state's), and why.
  uint64_t newest_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string newest_epoch_why_ ABSL_GUARDED_BY(mu_);
  bool server_aborted_ ABSL_GUARDED_BY(mu_) = false;           // a server's kAbort came
  bool expect_no_more_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<EarlierAttempt> earlier_ ABSL_GUARDED_BY(mu_);
  uint64_t earlier_epoch_completions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sends_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Placed buffers not yet delivered -> their slots (possibly of an ended
  // step).
  absl::flat_hash_map<const uint8_t*, ChunkSlot*> outstanding_ ABSL_GUARDED_BY(mu_);

  uint64_t stray_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections reported failed (ids are never reused, and a worker sees few
  // failures, so they are kept): a step that picks one up from the cache
  // just before its report is still ended by it.
  absl::flat_hash_set<transport::PeerId> failed_peers_ ABSL_GUARDED_BY(mu_);
  uint64_t peer_failures_that_aborted_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> auth_failures_ ABSL_GUARDED_BY(mu_);

  // Node-local aggregation: the members' contributions received and not
  // yet taken (of this step or a later one), and the other workers'
  // connections (node_contributions.h). Under mu_ because a leader's Take
  // waits for results and contributions alike.
  NodeContributions node_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_RESULT_INBOX_H_
