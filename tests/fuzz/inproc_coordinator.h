// A gift-coordinator inside the fuzzer's process: a ClusterState over a fresh
// SQLite file in a temporary directory, the CoordinatorService, and a
// grpc::Server that serves it in-process (InProcessChannel) and, when asked,
// on a Unix socket (for code that dials an address, such as giftctl). Time is
// a settable clock, so lease expiry is driven by the fuzz input.
//
// Reset() replaces the state, its file, the clock and the service with fresh
// ones behind the same server and channel, so a fuzzer can give every input
// a new coordinator without building a server per input (the server's
// threads and channel are most of a coordinator's start-up).
//
// Ownership: owns everything it starts; the destructor stops the server and
// removes the directory. Thread safety: the channel may be used from any
// thread; Advance may be called from any thread; Reset must not overlap a
// call (the fuzzers call it between inputs).
#ifndef GIFT_TESTS_FUZZ_INPROC_COORDINATOR_H_
#define GIFT_TESTS_FUZZ_INPROC_COORDINATOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"

namespace gift::fuzz {

class ManualClock : public coordinator::Clock {
 public:
  absl::Time Now() override;
  void Advance(absl::Duration d);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'800'000'000);
};

struct InprocCoordinatorOptions {
  bool listen_on_unix_socket = false;
  coordinator::ClusterOptions cluster = {.lease_ttl = absl::Seconds(10),
                                         .chunk_bytes = 4096,
                                         .max_basis_bytes = 1 << 20};
};

class InprocCoordinator {
 public:
  // Aborts when anything fails to start (a fuzzer cannot run without it).
  explicit InprocCoordinator(const InprocCoordinatorOptions& options = {});
  ~InprocCoordinator();
  InprocCoordinator(const InprocCoordinator&) = delete;
  InprocCoordinator& operator=(const InprocCoordinator&) = delete;

  // A fresh coordinator behind the same server: the calls of earlier inputs
  // have ended, their Watch streams are ended, and the state, file, clock
  // and service are new. Aborts when the old service's streams do not end.
  void Reset();

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  gift::v1::Coordinator::Stub* stub() const { return stub_.get(); }
  // "unix:/..." when listening on a socket, else empty.
  const std::string& address() const { return address_; }
  coordinator::ClusterStateMachine* state() const { return state_.get(); }
  ManualClock* clock() { return clock_.get(); }

 private:
  class ForwardingService;

  // Starts the state and the service (the forwarder then routes to it).
  void Start();
  // Ends the service's streams and destroys the service and the state.
  void Stop();

  const InprocCoordinatorOptions options_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<ManualClock> clock_;
  std::unique_ptr<coordinator::ClusterStateMachine> state_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<ForwardingService> forwarder_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gift::v1::Coordinator::Stub> stub_;
};

}  // namespace gift::fuzz

#endif  // GIFT_TESTS_FUZZ_INPROC_COORDINATOR_H_
