// Which members hold a Watch stream open to this coordinator process, and the
// peer failure reports waiting for their suspect's stream to close: the
// coordinator's own check behind ReportPeerFailure (coordinator.proto).
//
// A member's session keeps one Watch stream open for its whole life
// (common/control/member_session.h), on the same connection as its
// heartbeats. When its process dies the kernel closes that connection and
// gRPC ends the stream at once; that, not the reporter's word, confirms a
// report. So:
//   - Disconnected(id): id opened a stream in this process and none of its
//     streams is open now; or it joined through this process (Joined) and
//     opened none within `stream_grace` (a process killed between its Join
//     and its Watch: its daemon opens the stream right after joining). A
//     member not seen since this process started (e.g. right after a
//     coordinator restart, before it reconnected) is not disconnected:
//     reports about it wait for its lease.
//   - CheckOrRemember(report): Disconnected(suspect), or else remembers the
//     report for `window`, atomically with respect to Closed, so a report
//     that arrives just before the stream closes is not lost.
//   - Closed(id): the end of one of id's streams; when it was the last one,
//     returns the remembered reports about id (within their window), which
//     the caller now confirms.
// Limits: a client may open a Watch under any member id (operators watch
// without one), so a stream can be opened in another's name; that can only
// delay a confirmation (an open stream), not cause one, except while the
// real member is between reconnects (backoff, at most a few seconds).
//
// Thread safety: thread-safe. Ownership: plain values.
#ifndef GIFT_SERVER_COORDINATOR_MEMBER_CONNECTIONS_H_
#define GIFT_SERVER_COORDINATOR_MEMBER_CONNECTIONS_H_

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gift/v1/coordinator.pb.h"

namespace gift::coordinator {

class MemberConnections {
 public:
  explicit MemberConnections(absl::Duration window = absl::Seconds(2),
                             absl::Duration stream_grace = absl::Seconds(2))
      : window_(window), stream_grace_(stream_grace) {}

  // `member_id` joined through this process just now.
  void Joined(const std::string& member_id);
  void Opened(const std::string& member_id);
  std::vector<gift::v1::ReportPeerFailureRequest> Closed(const std::string& member_id);
  bool Disconnected(const std::string& member_id) const;
  bool CheckOrRemember(const gift::v1::ReportPeerFailureRequest& report);

 private:
  struct Pending {
    gift::v1::ReportPeerFailureRequest report;
    absl::Time until;
  };
  bool DisconnectedLocked(const std::string& member_id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void PruneLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Bounds on what is remembered (member ids seen, reports waiting).
  static constexpr size_t kMaxSeen = 4096;
  static constexpr size_t kMaxPending = 1024;

  const absl::Duration window_;
  const absl::Duration stream_grace_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mu_);              // open streams by member id
  std::set<std::string> seen_ ABSL_GUARDED_BY(mu_);                   // ids that opened one
  std::map<std::string, absl::Time> joined_ ABSL_GUARDED_BY(mu_);     // joined, none opened yet
  std::multimap<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by suspect id
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_MEMBER_CONNECTIONS_H_
