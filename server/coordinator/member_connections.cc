#include "server/coordinator/member_connections.h"

#include <utility>

namespace gift::coordinator {

void MemberConnections::Joined(const std::string& member_id) {
  if (member_id.empty()) return;
  absl::MutexLock lock(&mu_);
  if (seen_.contains(member_id)) return;
  if (joined_.size() >= kMaxSeen) {
    // Forget the oldest joins (their members then wait for their lease).
    const absl::Time cutoff = absl::Now() - 2 * stream_grace_;
    std::erase_if(joined_, [cutoff](const auto& j) { return j.second < cutoff; });
    if (joined_.size() >= kMaxSeen) joined_.clear();
  }
  joined_.try_emplace(member_id, absl::Now());
}

void MemberConnections::Opened(const std::string& member_id) {
  if (member_id.empty()) return;
  absl::MutexLock lock(&mu_);
  joined_.erase(member_id);
  if (seen_.size() >= kMaxSeen) {
    // Forget the ids without an open stream (members long gone).
    for (auto it = seen_.begin(); it != seen_.end();) {
      it = open_.contains(*it) ? std::next(it) : seen_.erase(it);
    }
  }
  seen_.insert(member_id);
  ++open_[member_id];
}

std::vector<gift::v1::ReportPeerFailureRequest> MemberConnections::Closed(
    const std::string& member_id) {
  std::vector<gift::v1::ReportPeerFailureRequest> confirmed;
  if (member_id.empty()) return confirmed;
  absl::MutexLock lock(&mu_);
  auto it = open_.find(member_id);
  if (it == open_.end()) return confirmed;
  if (--it->second > 0) return confirmed;
  open_.erase(it);
  const absl::Time now = absl::Now();
  auto [first, last] = pending_.equal_range(member_id);
  for (auto p = first; p != last; ++p) {
    if (p->second.until >= now) confirmed.push_back(std::move(p->second.report));
  }
  pending_.erase(first, last);
  return confirmed;
}

bool MemberConnections::DisconnectedLocked(const std::string& member_id) const {
  if (seen_.contains(member_id)) return !open_.contains(member_id);
  const auto joined = joined_.find(member_id);
  return joined != joined_.end() && absl::Now() - joined->second >= stream_grace_;
}

bool MemberConnections::Disconnected(const std::string& member_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return DisconnectedLocked(member_id);
}

void MemberConnections::PruneLocked(absl::Time now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = it->second.until < now ? pending_.erase(it) : std::next(it);
  }
}

bool MemberConnections::CheckOrRemember(const gift::v1::ReportPeerFailureRequest& report) {
  absl::MutexLock lock(&mu_);
  if (DisconnectedLocked(report.suspect_member_id())) return true;
  const absl::Time now = absl::Now();
  PruneLocked(now);
  if (pending_.size() < kMaxPending) {
    pending_.emplace(report.suspect_member_id(), Pending{report, now + window_});
  }
  return false;
}

}  // namespace gift::coordinator
