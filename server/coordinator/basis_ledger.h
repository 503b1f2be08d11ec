// The basis ledger of the coordinator's state machine: per tensor, the
// committed basis versions (with activation steps), the pending proposal
// with its acknowledgements, the owner, the refresh requests, the cache of
// live versions' bytes, and the changes not yet committed to the StateStore.
//
// Semantics (the state machine's contract, cluster_state.h):
//   - Propose replaces a pending proposal (its bytes are dropped); the
//     publisher counts as having acknowledged.
//   - MaybeCommit commits the proposal, at its tentative step, once every id
//     in `workers` has acknowledged it.
//   - Postpone moves every tentative step at or below a new
//     frozen_through_step to frozen + lead (postponements + 1), keeping the
//     invariant that pending steps lie above frozen_through_step.
//   - Prune drops the committed versions no worker can still use: those
//     whose successor is active at every worker's next step.
// Methods that change what a watcher sees return true; the caller makes the
// new revision. Every change is also recorded for the next commit
// (AddChangesTo / ClearChanges).
//
// Ownership: owns the states and the cached bytes (shared with readers of
// FetchBasis); pointers it returns stay valid until the next AddTensor or
// Reset.
// Thread safety: none (thread-compatible): the state machine guards it with
// its own lock.
#ifndef GIFT_SERVER_COORDINATOR_BASIS_LEDGER_H_
#define GIFT_SERVER_COORDINATOR_BASIS_LEDGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {

class BasisLedger {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (tensor id, version)

  // Replaces everything with stored states (no cached bytes, no changes).
  void Reset(std::vector<gift::v1::TensorBasisState> bases);

  const std::map<uint64_t, gift::v1::TensorBasisState>& bases() const { return bases_; }

  // A new tensor's state: only the direct version 0, active from step 0.
  // Forgets every tensor's basis state and bytes (a new run; the store's
  // rows go with TensorRegistry::DropAll's mutation).
  void DropAll();
  void AddTensor(uint64_t tensor_id);
  // NotFound for an unknown tensor.
  absl::StatusOr<gift::v1::TensorBasisState*> Find(uint64_t tensor_id);
  // The highest version committed or proposed (0 for a new tensor).
  static uint64_t LastVersion(const gift::v1::TensorBasisState& basis);

  void SetOwner(uint64_t tensor_id, const std::string& member_id);
  // One more refresh request for the tensor's owner.
  void RequestRefresh(uint64_t tensor_id);

  // Makes `header` (checked by the caller) the tensor's proposal at
  // `tentative_step`; `bytes` are kept unless the version is direct.
  void Propose(const gift::v1::BasisHeader& header, uint64_t tentative_step,
               std::shared_ptr<const std::string> bytes);
  // Adds `member_id`'s acknowledgement of the pending `version`; false when
  // that is not the pending version or it was acknowledged before.
  bool Ack(uint64_t tensor_id, uint64_t version, const std::string& member_id);
  bool MaybeCommit(gift::v1::TensorBasisState* basis, const std::set<std::string>& workers);
  bool MaybeCommitAll(const std::set<std::string>& workers);
  bool Postpone(uint64_t frozen_through_step, uint64_t lead_steps);
  bool Prune(gift::v1::TensorBasisState* basis, uint64_t min_next_step);
  bool PruneAll(uint64_t min_next_step);

  // The header of a committed or proposed version (member_id: the owner);
  // NotFound when the tensor has no such version.
  absl::StatusOr<gift::v1::BasisHeader> Header(uint64_t tensor_id, uint64_t version);
  // Cached bytes of a live version, or null (read them from the store).
  std::shared_ptr<const std::string> CachedBytes(uint64_t tensor_id, uint64_t version) const;
  void CacheBytes(uint64_t tensor_id, uint64_t version, std::shared_ptr<const std::string> bytes);

  struct Counters {
    uint64_t commits = 0;
    uint64_t postponements = 0;  // activation steps moved later
  };
  const Counters& counters() const { return counters_; }

  // Copies the pending changes into `mutation` (put bases, put/delete basis
  // bytes); ClearChanges once the commit succeeded.
  void AddChangesTo(StoreMutation* mutation) const;
  void ClearChanges();

 private:
  void DropBytes(uint64_t tensor_id, uint64_t version);

  std::map<uint64_t, gift::v1::TensorBasisState> bases_;  // by tensor id
  // Bytes of live versions, filled on publish and on first fetch after a restart.
  std::map<Key, std::shared_ptr<const std::string>> bytes_;
  std::set<uint64_t> put_bases_;
  std::map<Key, std::shared_ptr<const std::string>> put_bytes_;
  std::set<Key> delete_bytes_;
  Counters counters_;  // since this process started; Reset keeps them
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_BASIS_LEDGER_H_
