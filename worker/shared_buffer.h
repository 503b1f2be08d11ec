// A client's buffer mapped into the worker daemon: a POSIX shared-memory
// object (shm_open name) the training process created and registered
// through the Worker API (worker.proto SharedBuffer), mapped read-write so
// that PushPull reads the gradient and writes the average in place without
// moving bytes through gRPC.
//
// The mapping is checked before use: the name must be a single
// "/name" component, the object must be a regular shared-memory object at
// least offset + size bytes long, and offset + size must not overflow. A
// client that truncates the object later makes accesses fault; the daemon
// guards against that by holding its own mapping of the length it checked
// (the pages stay valid while mapped, even if the name is unlinked).
//
// Ownership: the object owns its mapping (unmapped on destruction), not the
// shared-memory object, which the client creates and unlinks.
// Thread safety: immutable after Open; the bytes are shared with the client,
// which must not write them during a PushPull.
#ifndef GIFT_WORKER_SHARED_BUFFER_H_
#define GIFT_WORKER_SHARED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::worker {

class SharedBuffer {
 public:
  // Maps [offset, offset + size) of the object `name`. InvalidArgument for a
  // bad name, a zero size or an overflowing range; NotFound when no such
  // object exists; PermissionDenied when it cannot be opened read-write;
  // OutOfRange when the object is smaller than offset + size.
  static absl::StatusOr<SharedBuffer> Open(absl::string_view name, uint64_t offset, uint64_t size);

  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  SharedBuffer() = default;
  void Reset();

  std::string name_;
  void* mapping_ = nullptr;  // page-aligned start of the mapping
  size_t mapping_size_ = 0;
  void* data_ = nullptr;  // mapping_ + (offset - page-aligned offset)
  uint64_t size_ = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_SHARED_BUFFER_H_
