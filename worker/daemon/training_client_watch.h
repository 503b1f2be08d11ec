// Whether the training process (the client) whose buffers this worker
// registered is still there. The worker tells the coordinator (Member.client,
// through the session's heartbeats), which starts a new run by itself for a
// registration without a run id once every client of the current run has
// left: a training script started again from step 0 needs no run id, while a
// live run stays protected from a stray client (docs/operations.md, Runs).
//
// A client is watched through the buffer socket: its buffers came over one or
// more connections, and it has left when all of them have closed (its process
// ended, or it closed its client). Registrations in the same run add up (a
// stray client that joined a live run does not hide the live one): the run's
// clients on this worker have left when every connection of every
// registration in the run has closed. A registration with a device buffer
// (CUDA IPC, no connection) cannot be watched: the run's clients on this
// worker count as connected until a registration in another run.
//
//   uint64_t n = watch.NextRegistration();
//   ... RegisterTensors(..., {.registration = n, ...}) ...
//   watch.Registered(n, run_generation, request.buffers(), socket);
//   // BufferSocket's on_closed: watch.ConnectionClosed(connection)
//
// Ownership: owns its state; `report` is called (under the watch's lock, so
// in order) with every change, and must not call back into the watch.
// Thread safety: every method may be called from any thread.
#ifndef GIFT_WORKER_DAEMON_TRAINING_CLIENT_WATCH_H_
#define GIFT_WORKER_DAEMON_TRAINING_CLIENT_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/worker.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "worker/intake/buffer_socket.h"

namespace gift::worker {

class TrainingClientWatch {
 public:
  // `report`: the worker passes MemberSession::SetTrainingClient.
  using Report = std::function<void(const gift::v1::TrainingClient&)>;
  explicit TrainingClientWatch(Report report) : report_(std::move(report)) {}

  // The number of the next registration (1, 2, ...).
  uint64_t NextRegistration();

  // Registration `registration` of `buffers` succeeded in the run of
  // `run_generation`. Each buffer handed over on `socket` (null: none) is
  // watched through its connection (added to those of earlier registrations
  // in the same run); one whose connection has already closed counts as
  // gone.
  void Registered(uint64_t registration, uint64_t run_generation,
                  const google::protobuf::RepeatedPtrField<gift::v1::BufferSpec>& buffers,
                  const BufferSocket* socket);

  // A buffer socket connection closed (BufferSocket's on_closed).
  void ConnectionClosed(uint64_t connection);

  // Whether the clients of the last registration's run have left (false
  // before any registration).
  bool left() const;

 private:
  const Report report_;
  mutable absl::Mutex mu_;
  uint64_t next_registration_ ABSL_GUARDED_BY(mu_) = 1;
  gift::v1::TrainingClient client_ ABSL_GUARDED_BY(mu_);  // registration 0: none yet
  bool watchable_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<uint64_t> open_connections_ ABSL_GUARDED_BY(mu_);
};

// The workers of `state` whose training client of the current run is
// connected, as "rank R (name)" joined by ", "; "" when none (for the error of
// a step the run has already taken).
std::string ConnectedRunClients(const gift::v1::ClusterState& state);

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_TRAINING_CLIENT_WATCH_H_
