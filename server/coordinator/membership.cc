#include "server/coordinator/membership.h"

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/member_role.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
constexpr char kMemberIdPrefix[] = "m";

}  // namespace

bool IsWorker(const gift::v1::Member& m) { return m.role() == gift::v1::MEMBER_ROLE_WORKER; }

namespace {

// Why an evicted worker was removed, for Live's message.
absl::string_view EvictionReason(absl::string_view event) {
  if (event == "fail") return "a peer reported it failed";
  if (event == "disconnect")
    return "its connection to the coordinator died while a step waited for it";
  return "its lease expired";
}

}  // namespace

void Membership::Reset(uint64_t epoch, uint64_t next_member_seq,
                       std::vector<gift::v1::Member> members) {
  epoch_ = epoch;
  next_member_seq_ = next_member_seq;
  members_.clear();
  joining_.clear();
  stepped_ = false;
  for (gift::v1::Member& m : members) {
    if (IsWorker(m) && m.last_step() > 0) stepped_ = true;
    std::string id = m.member_id();
    members_[id] = std::move(m);
  }
  ClearChanges();
}

absl::StatusOr<gift::v1::Member*> Membership::Live(const std::string& member_id) {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id is empty");
  auto it = members_.find(member_id);
  if (it != members_.end()) return &it->second;
  if (auto j = joining_.find(member_id); j != joining_.end()) return &j->second;
  uint64_t seq = 0;
  absl::string_view id = member_id;
  if (absl::ConsumePrefix(&id, kMemberIdPrefix) && absl::SimpleAtoi(id, &seq) && seq >= 1 &&
      seq < next_member_seq_) {
    auto evicted = evicted_at_step_.find(member_id);
    if (evicted != evicted_at_step_.end()) {
      uint64_t min_next = 0, max_last = 0;
      WorkerSteps(&min_next, &max_last);
      return absl::FailedPreconditionError(absl::StrCat(
          "member ", member_id, " was evicted at step ", evicted->second.step, " (",
          EvictionReason(evicted->second.event), "), cluster at step ", max_last, "; join again"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", member_id, " is no longer a member (it left or its lease expired); join again"));
  }
  return absl::NotFoundError(absl::StrCat("unknown member '", member_id, "'"));
}

absl::StatusOr<gift::v1::Member*> Membership::LiveWorker(const std::string& member_id) {
  GIFT_ASSIGN_OR_RETURN(gift::v1::Member * m, Live(member_id));
  if (!IsWorker(*m)) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_id, " is a ", rpc::MemberRoleName(m->role()), ", not a worker"));
  }
  return m;
}

gift::v1::Member* Membership::FindByName(absl::string_view name) {
  for (auto* map : {&members_, &joining_}) {
    for (auto& [id, m] : *map) {
      if (m.name() == name) return &m;
    }
  }
  return nullptr;
}

gift::v1::Member& Membership::Add(gift::v1::Member member) {
  member.set_member_id(absl::StrCat(kMemberIdPrefix, next_member_seq_++));
  member.set_rank(kNoRank);
  ++epoch_;
  member.set_joined_epoch(epoch_);
  const std::string id = member.member_id();
  gift::v1::Member& added = members_[id] = std::move(member);
  MarkChanged(added);
  return added;
}

gift::v1::Member& Membership::AddJoining(gift::v1::Member member, uint64_t admit_step) {
  member.set_member_id(absl::StrCat(kMemberIdPrefix, next_member_seq_++));
  member.set_rank(kNoRank);
  member.set_admit_step(admit_step);
  member.set_joined_epoch(epoch_);
  const std::string id = member.member_id();
  return joining_[id] = std::move(member);
}

bool Membership::MinAdmitStep(uint64_t* admit_step) const {
  if (joining_.empty()) return false;
  *admit_step = std::numeric_limits<uint64_t>::max();
  for (const auto& [id, m] : joining_) *admit_step = std::min(*admit_step, m.admit_step());
  return true;
}

bool Membership::JoinerReady() const {
  uint64_t admit = 0, min_next = 0, max_last = 0;
  if (!MinAdmitStep(&admit)) return false;
  // Every member worker has completed the steps below the admit step.
  return !WorkerSteps(&min_next, &max_last) || min_next >= admit;
}

std::vector<std::string> Membership::AdmitReady() {
  std::vector<std::string> admitted;
  while (JoinerReady()) {
    // The lowest admit step first (join order among equal ones).
    auto next = joining_.begin();
    for (auto it = joining_.begin(); it != joining_.end(); ++it) {
      if (std::make_pair(it->second.admit_step(), it->second.joined_epoch()) <
          std::make_pair(next->second.admit_step(), next->second.joined_epoch())) {
        next = it;
      }
    }
    gift::v1::Member member = std::move(next->second);
    joining_.erase(next);
    ++epoch_;
    member.set_joined_epoch(epoch_);
    // It resumes at its admit step (design.md 6.5: a worker resuming at a
    // later step is at step - 1).
    if (member.admit_step() > 0) member.set_last_step(member.admit_step() - 1);
    const std::string id = member.member_id();
    MarkChanged(members_[id] = std::move(member));
    admitted.push_back(id);
  }
  return admitted;
}

void Membership::Remove(const std::string& member_id, absl::string_view event, int64_t now_ms) {
  if (auto j = joining_.find(member_id); j != joining_.end()) {
    Record(event, j->second, now_ms);
    joining_.erase(j);
    ForgetStepsWithoutWorkers();
    return;
  }
  auto it = members_.find(member_id);
  if (it == members_.end()) return;
  ++epoch_;
  Record(event, it->second, now_ms);
  if ((event == "expire" || event == "fail" || event == "disconnect") && IsWorker(it->second)) {
    if (evicted_at_step_.size() >= kMaxEvicted) evicted_at_step_.clear();
    evicted_at_step_[member_id] = {it->second.last_step(), std::string(event)};
  }
  put_members_.erase(member_id);
  delete_members_.insert(member_id);
  members_.erase(it);
  ForgetStepsWithoutWorkers();
}

void Membership::ForgetStepsWithoutWorkers() {
  if (!joining_.empty()) return;
  for (const auto& [id, m] : members_) {
    if (IsWorker(m)) return;
  }
  stepped_ = false;  // the next workers start a new job
}

std::vector<std::string> Membership::Expired(int64_t now_ms) const {
  std::vector<std::string> expired;
  for (const auto* map : {&members_, &joining_}) {
    for (const auto& [id, m] : *map) {
      if (m.lease_expires_unix_ms() <= now_ms) expired.push_back(id);
    }
  }
  return expired;
}

void Membership::RerankRole(gift::v1::MemberRole role) {
  std::vector<gift::v1::Member*> ms;
  for (auto& [id, m] : members_) {
    if (m.role() == role) ms.push_back(&m);
  }
  // Rank order, then join order (earlier epoch, then id), for determinism.
  std::sort(ms.begin(), ms.end(), [](const gift::v1::Member* a, const gift::v1::Member* b) {
    return std::make_tuple(a->rank(), a->joined_epoch(), a->member_id()) <
           std::make_tuple(b->rank(), b->joined_epoch(), b->member_id());
  });
  const uint32_t count = static_cast<uint32_t>(ms.size());
  std::vector<bool> taken(count, false);
  std::vector<gift::v1::Member*> unranked;
  for (gift::v1::Member* m : ms) {
    if (m->rank() < count && !taken[m->rank()]) {
      taken[m->rank()] = true;
    } else {
      unranked.push_back(m);
    }
  }
  size_t next = 0;
  for (uint32_t r = 0; r < count; ++r) {
    if (taken[r]) continue;
    unranked[next++]->set_rank(r);
  }
}

void Membership::Rerank() {
  RerankRole(gift::v1::MEMBER_ROLE_WORKER);
  RerankRole(gift::v1::MEMBER_ROLE_SERVER);
  for (const auto& [id, m] : members_) put_members_[id] = m;
}

uint32_t Membership::Count(gift::v1::MemberRole role) const {
  uint32_t n = 0;
  for (const auto& [id, m] : members_) n += m.role() == role ? 1 : 0;
  return n;
}

bool Membership::WorkerSteps(uint64_t* min_next_step, uint64_t* max_last_step) const {
  bool any = false;
  *min_next_step = std::numeric_limits<uint64_t>::max();
  *max_last_step = 0;
  for (const auto& [id, m] : members_) {
    if (!IsWorker(m)) continue;
    any = true;
    *min_next_step = std::min(*min_next_step, m.last_step() + 1);
    *max_last_step = std::max(*max_last_step, m.last_step());
  }
  return any;
}

std::set<std::string> Membership::WorkerIds() const {
  std::set<std::string> ids;
  for (const auto& [id, m] : members_) {
    if (IsWorker(m)) ids.insert(id);
  }
  return ids;
}

void Membership::Record(absl::string_view event, const gift::v1::Member& member, int64_t now_ms) {
  MembershipEvent& e = history_.emplace_back();
  e.time_unix_ms = now_ms;
  e.epoch = epoch_;
  e.event = std::string(event);
  e.member_id = member.member_id();
  e.name = member.name();
  e.role = member.role();
  e.rank = member.rank();
  Log(Level::kInfo, absl::StrCat("member_", event),
      {{"member_id", member.member_id()},
       {"name", member.name()},
       {"role", rpc::MemberRoleName(member.role())},
       {"rank", member.rank()},
       {"epoch", epoch_}});
}

void Membership::MarkChanged(const gift::v1::Member& member) {
  if (joining_.contains(member.member_id())) return;
  put_members_[member.member_id()] = member;
}

void Membership::AddChangesTo(StoreMutation* mutation) const {
  for (const auto& [id, member] : put_members_) mutation->put_members.push_back(member);
  mutation->delete_members.assign(delete_members_.begin(), delete_members_.end());
  mutation->history = history_;
}

void Membership::ClearChanges() {
  put_members_.clear();
  delete_members_.clear();
  history_.clear();
}

}  // namespace gift::coordinator
