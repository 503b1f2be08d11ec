// Fast failure detection, the member's side: every data-plane peer that a
// transport reports failed (TransportHandlers::on_peer_failure: a UCX
// endpoint error in error-handling mode PEER, e.g. the peer's process died)
// is reported to the coordinator (MemberSession::ReportPeerFailure), which
// confirms it with its own check and ends the epoch without waiting for the
// suspect's lease (proto/gift/v1/coordinator.proto, ReportPeerFailure).
//
//   PeerFailureReporter reporter;
//   auto engine = PushPullEngine::Create(reporter.Wrap(make_ucx_transport), ...);
//   auto session = MemberSession::Start(...);
//   reporter.Attach(session->get());
//   ... run ...
//   (*session)->Close();
//   reporter.Detach();
//
// Wrap returns a factory whose transports forward everything to the
// transports `inner` makes and remember the address of every peer they
// Connect to; a failed peer's address is queued (the transport's callback
// never blocks) and a background thread maps it to the member whose
// data_address it is in the session's latest cluster state and reports it.
// A report the coordinator does not confirm yet (FAILED_PRECONDITION: the
// suspect still looks connected) or cannot commit (UNAVAILABLE: e.g. its disk
// is full) is retried while the suspect is still a member, every kRetryDelay
// for up to kRetries attempts (3 s in all; then the suspect's lease
// decides); failures to unknown addresses (members already gone) are
// dropped.
//
// Ownership: the reporter must outlive every transport its factories made
// and be detached (Detach) before the session it reports through goes. It
// does not own the session. Thread safety: all methods are thread-safe; Detach waits for
// a report in flight.
#ifndef GIFT_COMMON_CONTROL_PEER_FAILURE_REPORTER_H_
#define GIFT_COMMON_CONTROL_PEER_FAILURE_REPORTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "common/transport/transport.h"

namespace gift::control {

class PeerFailureReporter {
 public:
  static constexpr int kRetries = 15;
  static constexpr absl::Duration kRetryDelay = absl::Milliseconds(200);

  PeerFailureReporter();
  ~PeerFailureReporter();
  PeerFailureReporter(const PeerFailureReporter&) = delete;
  PeerFailureReporter& operator=(const PeerFailureReporter&) = delete;

  transport::TransportFactory Wrap(transport::TransportFactory inner);

  // Reports go through `session` from now on (failures seen before are
  // reported too). `session` must stay valid until Detach.
  void Attach(MemberSession* session);
  // No more reports; waits for one in flight.
  void Detach();

  struct Counters {
    uint64_t failures = 0;   // peer failures the transports reported
    uint64_t reports = 0;    // ReportPeerFailure calls made
    uint64_t evictions = 0;  // of them, those that evicted the suspect
  };
  Counters counters() const;

  // Called by the wrapped transports (on their progress threads).
  void OnPeerFailure(std::string address, const absl::Status& reason);

 private:
  struct Failure {
    std::string address;
    std::string reason;
    int attempts = 0;
    absl::Time not_before;
  };
  void Loop();
  // One attempt; true when the failure is settled (reported, confirmed or
  // moot), false to try again later.
  bool Report(const Failure& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(session_mu_);

  mutable absl::Mutex mu_;
  std::deque<Failure> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);

  absl::Mutex session_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  MemberSession* session_ ABSL_GUARDED_BY(session_mu_) = nullptr;

  std::thread thread_;
};

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_PEER_FAILURE_REPORTER_H_
