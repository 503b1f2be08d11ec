// The client side of the worker's buffer socket (worker/intake/buffer_socket.h):
// a SealedRegion is anonymous shared memory (a memfd sealed against shrinking
// and growing, so the worker can never fault on it) mapped read-write here,
// and a BufferChannel hands regions to the worker, which answers a handle to
// name them in RegisterBuffers / SubmitActivationStats.
//
// Ownership: a SealedRegion owns its descriptor and mapping (closed and
// unmapped on destruction; the worker's own mapping keeps the memory alive
// for as long as it uses it). A BufferChannel owns its connection; the
// worker forgets the handles it answered when the channel is destroyed.
// Thread safety: neither is synchronized; BufferChannel::Hand calls must not
// overlap (WorkerClient serializes them).
#ifndef GIFT_WORKER_CLIENT_BUFFER_HANDOFF_H_
#define GIFT_WORKER_CLIENT_BUFFER_HANDOFF_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gift::client {

class SealedRegion {
 public:
  // A zero-filled region of `size_bytes` (> 0). INVALID_ARGUMENT for size
  // 0, INTERNAL when memfd_create / ftruncate / sealing / mmap fail.
  static absl::StatusOr<SealedRegion> Create(size_t size_bytes);

  SealedRegion() = default;
  SealedRegion(SealedRegion&& other) noexcept;
  SealedRegion& operator=(SealedRegion&& other) noexcept;
  SealedRegion(const SealedRegion&) = delete;
  SealedRegion& operator=(const SealedRegion&) = delete;
  ~SealedRegion();

  void* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  int fd() const { return fd_; }

 private:
  void Reset();

  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
};

class BufferChannel {
 public:
  // Connects to the buffer socket at `path`. UNAVAILABLE when it cannot.
  // A handoff waits at most 60 s for the worker's answer.
  static absl::StatusOr<std::unique_ptr<BufferChannel>> Connect(const std::string& path);
  ~BufferChannel();
  BufferChannel(const BufferChannel&) = delete;
  BufferChannel& operator=(const BufferChannel&) = delete;

  // Hands the descriptor `fd` over; returns the worker's handle for it, or
  // the worker's error (its status code and message), UNAVAILABLE when the
  // connection failed.
  absl::StatusOr<std::string> Hand(int fd);
  // Tells the worker this client no longer names `handle` (its registered
  // tensors keep their memory); UNAVAILABLE when the connection failed.
  absl::Status Release(const std::string& handle);

 private:
  explicit BufferChannel(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace gift::client

#endif  // GIFT_WORKER_CLIENT_BUFFER_HANDOFF_H_
