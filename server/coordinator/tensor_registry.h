// The tensor registry of the coordinator's state machine: the registered
// tensors (id, name, shape, dtype, element count) by id and by name, and the
// registrations not yet committed to the StateStore.
//
// Registration is idempotent by name: a name registered again with the same
// shape and dtype is the same tensor; with another shape or dtype it is
// refused (AlreadyExists). Ids are handed out by the caller (the meta
// record's counter) and never reused.
//
// Ownership: owns its records; references it returns stay valid until the
// next Reset.
// Thread safety: none (thread-compatible): the state machine guards it with
// its own lock.
#ifndef GIFT_SERVER_COORDINATOR_TENSOR_REGISTRY_H_
#define GIFT_SERVER_COORDINATOR_TENSOR_REGISTRY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/tensor_shape.h"
#include "common/policy/policy.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {

using ::gift::ShapeString;  // "[d0, d1, ...]" (common/base/tensor_shape.h)

class TensorRegistry {
 public:
  // Replaces everything with stored records (no pending changes).
  void Reset(std::vector<gift::v1::TensorInfo> tensors);

  const std::map<uint64_t, gift::v1::TensorInfo>& tensors() const { return tensors_; }
  // The tensor with id `tensor_id`, which must be registered.
  const gift::v1::TensorInfo& at(uint64_t tensor_id) const { return tensors_.at(tensor_id); }
  // The tensor named `name`, or null.
  const gift::v1::TensorInfo* FindByName(absl::string_view name) const;

  // Checks every spec of a request (name, shape: dimensions >= 1 and at most
  // 2^40 elements (common/base/tensor_shape.h), dtype, no conflict with a registered tensor or
  // within the request): InvalidArgument or AlreadyExists naming the tensor. Returns the specs of
  // names not registered yet, each once (pointers into `request`).
  absl::StatusOr<std::vector<const gift::v1::TensorSpec*>> Check(
      const gift::v1::RegisterTensorsRequest& request) const;
  // Registers a checked spec of a new name under `tensor_id`.
  const gift::v1::TensorInfo& Add(const gift::v1::TensorSpec& spec, uint64_t tensor_id);

  // The registered tensors' names and shapes, then `extra`'s (views into
  // them and into this registry).
  std::vector<policy::NamedShape> Shapes(
      const std::vector<const gift::v1::TensorSpec*>& extra) const;

  // Drops every tensor (a new run); returns their names.
  std::vector<std::string> DropAll();

  // Copies the pending registrations (and a DropAll) into `mutation`;
  // ClearChanges once the commit succeeded.
  void AddChangesTo(StoreMutation* mutation) const;
  void ClearChanges() {
    put_tensors_.clear();
    dropped_all_ = false;
  }

 private:
  std::map<uint64_t, gift::v1::TensorInfo> tensors_;         // by tensor id
  std::map<std::string, uint64_t, std::less<>> tensor_ids_;  // by name
  std::set<uint64_t> put_tensors_;
  bool dropped_all_ = false;
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_TENSOR_REGISTRY_H_
