// The worker's buffer socket: where a training process hands its buffers to
// the worker (the gRPC Worker API cannot carry file descriptors).
//
// Protocol (a SOCK_SEQPACKET Unix socket, by convention "<worker socket>.buffers",
// also reported in WorkerInfo.buffer_socket):
//   client -> worker  one message: the payload "GIFT-BUFFER-1" and, as
//                     SCM_RIGHTS, exactly one memfd sealed with F_SEAL_SHRINK
//                     (shared_buffer.h says why);
//   worker -> client  "OK <handle>" (32 hex digits, random) or
//                     "ERR <CODE> <message>" (an absl status code name);
//   client -> worker  "GIFT-RELEASE-1 <handle>" (no descriptor): the client
//                     no longer names that handle (a replaced set); the
//                     worker forgets it (registered tensors keep their
//                     mapping) and answers "OK". Only the connection that
//                     handed a buffer over can release its handle.
// The client then registers tensors at offsets of the buffer by naming the
// handle (worker.proto SharedBuffer.handle). A handle is valid while the
// connection it was handed over on stays open; the worker drops it (not the
// registered mappings, which keep the memory) when the client disconnects.
// The peer's credentials (SO_PEERCRED) are logged; the socket file is
// created 0660, like the Worker API socket.
//
// Limits, so that one local user cannot starve the others (each handed
// buffer is a mapping, and the kernel allows a process about 65,530):
// kMaxConnections connections in all and kMaxConnectionsPerUser per uid,
// kMaxHandlesPerConnection handles per connection, kMaxHandlesPerUser per
// uid and kMaxHandles in all. Past one, that client gets "ERR
// RESOURCE_EXHAUSTED ..." (a connection: the reply, then it is closed);
// others are not affected.
//
// Each connection has a number (ConnectionOf) never reused while the socket
// lives; when one closes (the client closed it or its process ended, or the
// worker closed it on a protocol error), `on_closed` is called with it after
// its handles are dropped, so that the worker knows its client has gone
// (docs/operations.md, Runs).
//
// Ownership: owns the listening socket, its connections and the handed
// buffers; unlinks the socket file on destruction. Thread safety: Find and
// ConnectionOf may be called from any thread; one background thread serves
// the socket and runs `on_closed`, which must not block for long nor destroy
// the socket.
#ifndef GIFT_WORKER_INTAKE_BUFFER_SOCKET_H_
#define GIFT_WORKER_INTAKE_BUFFER_SOCKET_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "worker/intake/shared_buffer.h"

namespace gift::worker {

inline constexpr size_t kMaxBufferSocketConnections = 256;
inline constexpr size_t kMaxBufferSocketConnectionsPerUser = 64;
inline constexpr size_t kMaxHandlesPerConnection = 4096;
inline constexpr size_t kMaxHandlesPerUser = 4096;
inline constexpr size_t kMaxHandles = 16384;

inline constexpr absl::string_view kBufferHandoffMagic = "GIFT-BUFFER-1";
inline constexpr absl::string_view kBufferReleasePrefix = "GIFT-RELEASE-1 ";

class BufferSocket {
 public:
  using ConnectionClosed = std::function<void(uint64_t connection)>;
  // Binds `path` (removing a stale socket file there) and starts serving.
  static absl::StatusOr<std::unique_ptr<BufferSocket>> Start(const std::string& path,
                                                             ConnectionClosed on_closed = nullptr);
  ~BufferSocket();
  BufferSocket(const BufferSocket&) = delete;
  BufferSocket& operator=(const BufferSocket&) = delete;

  // The buffer handed over as `handle`; NotFound for an unknown handle or one
  // whose connection has closed.
  absl::StatusOr<std::shared_ptr<const SharedBuffer>> Find(absl::string_view handle) const;
  // The connection `handle` was handed over on; NotFound as Find.
  absl::StatusOr<uint64_t> ConnectionOf(absl::string_view handle) const;

  const std::string& path() const { return path_; }

 private:
  BufferSocket(std::string path, int listen_fd, int wake_fd, ConnectionClosed on_closed);
  void Serve();
  // Answers one message of connection `fd`; false when it closed.
  bool Receive(int fd);
  void Release(int fd, absl::string_view handle);
  // Forgets connection `fd` and its handles and closes it; `report`: tells
  // on_closed (not while the socket shuts down).
  void Drop(int fd, bool report);

  const std::string path_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: written to stop Serve
  const ConnectionClosed on_closed_;

  mutable absl::Mutex mu_;
  struct Handed {
    int connection;                // its fd
    uint64_t connection_number;   // ConnectionOf
    std::shared_ptr<const SharedBuffer> buffer;
  };
  absl::flat_hash_map<std::string, Handed> handed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, size_t> per_connection_ ABSL_GUARDED_BY(mu_);  // fd -> handles
  // The peer uid of each connection (SO_PEERCRED at accept), and per uid its
  // connections and handles. Serve's thread only.
  absl::flat_hash_map<int, uid_t> uid_of_;
  absl::flat_hash_map<int, uint64_t> number_of_;  // fd -> connection number
  uint64_t next_number_ = 1;
  absl::flat_hash_map<uid_t, size_t> connections_of_uid_;
  absl::flat_hash_map<uid_t, size_t> handles_of_uid_ ABSL_GUARDED_BY(mu_);
  std::thread server_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_BUFFER_SOCKET_H_
