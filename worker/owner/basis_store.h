// The bases this worker uses: parsed transforms by (tensor id, version),
// fetched from the coordinator on first use, and the acknowledgements of
// pending proposals (a proposal commits only when every worker has
// acknowledged it, so acknowledging means "I hold it and can use it").
//
//   BasisStore store(session);
//   store.Sync(*session->state());                // fetch + ack proposals
//   auto t = store.Get(tensor_id, version);        // for a step's plan
//
// Ownership: does not own the session, which must outlive the store.
// Thread safety: thread-safe. Fetches run outside the lock; two threads that
// miss the same version may both fetch it (the second result is dropped).
#ifndef GIFT_WORKER_OWNER_BASIS_STORE_H_
#define GIFT_WORKER_OWNER_BASIS_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/control/member_session.h"
#include "common/transform/gradient_transform.h"
#include "gift/v1/cluster.pb.h"

namespace gift::worker {

class BasisStore {
 public:
  explicit BasisStore(const control::MemberSession* session) : session_(session) {}

  // The transform of a non-direct version: from the cache, else fetched
  // (size and CRC checked by the session) and parsed. Errors of the fetch
  // (e.g. NotFound for a pruned version) or DataLoss / InvalidArgument for
  // bytes that do not parse.
  absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> Get(uint64_t tensor_id,
                                                                          uint64_t version);

  // Adds a transform this member built itself (the owner), so it is never
  // fetched back.
  void Put(uint64_t tensor_id, uint64_t version,
           std::shared_ptr<const transform::GradientTransform> transform);

  // For every pending proposal of `state` this member has not acknowledged
  // yet: fetches it (unless direct) and acknowledges it. Drops cached
  // versions the state no longer lists. Returns the first error; the other
  // proposals are still handled.
  absl::Status Sync(const gift::v1::ClusterState& state);

  size_t cached() const;
  uint64_t acknowledged() const;

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // (tensor id, version)

  const control::MemberSession* const session_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<const transform::GradientTransform>> cache_
      ABSL_GUARDED_BY(mu_);
  // (member id, tensor id, version): a member that re-joins under a new id
  // acknowledges again.
  absl::flat_hash_set<std::tuple<std::string, uint64_t, uint64_t>> acked_ ABSL_GUARDED_BY(mu_);
  uint64_t acknowledged_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_OWNER_BASIS_STORE_H_
