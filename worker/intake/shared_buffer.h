// A client's buffer mapped into the worker daemon: a memfd the training
// process created, sealed and handed to the worker over its buffer socket
// (buffer_socket.h), mapped read-write so that PushPull reads the gradient
// and writes the average in place without moving bytes through gRPC.
//
// Why a sealed memfd and not a named POSIX shared-memory object: any process
// that can write a shm object (the client must) can also shrink it with
// ftruncate at any time, and the worker's next access to a page past the
// new end faults with SIGBUS; no check at registration (size, owner, mode)
// survives a later ftruncate, and POSIX shm objects cannot be sealed. A
// memfd carrying F_SEAL_SHRINK can never become smaller (seals are never
// removed), so every page of the mapping stays valid for the worker's
// lifetime of it. Handing the descriptor over (SCM_RIGHTS) is also the
// capability: the worker maps exactly what the client could open, never an
// object named by a string (no other user's object can be named into it).
//
// Ownership: owns its mapping (unmapped on destruction), not the descriptor
// it was mapped from (the caller closes it; the mapping keeps the memory).
// Thread safety: immutable after MapSealed; the bytes are shared with the
// client, which must not write them during a PushPull.
#ifndef GIFT_WORKER_INTAKE_SHARED_BUFFER_H_
#define GIFT_WORKER_INTAKE_SHARED_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace gift::worker {

class SharedBuffer {
 public:
  // Maps the whole of `fd` read-write. FailedPrecondition unless `fd` is a
  // regular file (a memfd) opened read-write, of non-zero size, that carries
  // F_SEAL_SHRINK and no write seal; Internal when mmap fails.
  static absl::StatusOr<SharedBuffer> MapSealed(int fd);

  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  // [offset, offset + size) of the mapping, `alignment` aligned (a power of
  // two). InvalidArgument for a zero size, an overflowing or misaligned
  // range; OutOfRange when the range ends past the buffer.
  absl::StatusOr<char*> Range(uint64_t offset, uint64_t size, uint64_t alignment) const;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  SharedBuffer() = default;
  void Reset();

  char* data_ = nullptr;  // the page-aligned mapping
  uint64_t size_ = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_SHARED_BUFFER_H_
