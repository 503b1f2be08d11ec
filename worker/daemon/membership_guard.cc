#include "worker/daemon/membership_guard.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/control/member_text.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

using control::DescribeMember;

namespace {
constexpr size_t kEpochsKept = 8;
}  // namespace

std::vector<gift::v1::Member> LostWorkers(const gift::v1::ClusterState& before,
                                          const gift::v1::ClusterState& after,
                                          const std::string& self_name) {
  absl::flat_hash_set<std::string> now;
  for (const gift::v1::Member& w : after.workers()) now.insert(w.member_id());
  std::vector<gift::v1::Member> lost;
  for (const gift::v1::Member& w : before.workers()) {
    if (!now.contains(w.member_id()) && w.name() != self_name) lost.push_back(w);
  }
  std::sort(lost.begin(), lost.end(), [](const gift::v1::Member& a, const gift::v1::Member& b) {
    return a.rank() < b.rank();
  });
  return lost;
}

std::string DescribeWorkers(const std::vector<gift::v1::Member>& workers) {
  std::vector<std::string> parts;
  for (const gift::v1::Member& m : workers) parts.push_back(DescribeMember(m));
  return absl::StrJoin(parts, ", ");
}

std::string MembershipGuard::NameOf(const gift::v1::ClusterState& state,
                                    const std::string& self_id) {
  for (const gift::v1::Member& w : state.workers()) {
    if (w.member_id() == self_id) return w.name();
  }
  return "";
}

void MembershipGuard::Observe(std::shared_ptr<const gift::v1::ClusterState> state) {
  if (state == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto& slot = by_epoch_[state->epoch()];
  if (slot == nullptr || slot->revision() < state->revision()) slot = std::move(state);
  while (by_epoch_.size() > kEpochsKept) by_epoch_.erase(by_epoch_.begin());
}

absl::Status MembershipGuard::Check(const gift::v1::ClusterState& state, uint64_t step,
                                    const std::string& self_id) const {
  for (const gift::v1::Member& w : state.workers()) {
    if (w.member_id() == self_id || w.registration_error().empty()) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, " cannot complete: ", DescribeMember(w),
        " cannot push it, the coordinator refused its registration: ", w.registration_error()));
  }
  if (state.policy().on_member_loss() != gift::v1::ON_MEMBER_LOSS_FAIL) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (baseline_ == nullptr) return absl::OkStatus();
  const std::vector<gift::v1::Member> lost = LostWorkers(*baseline_, state, self_name_);
  if (lost.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "on_member_loss=fail: ", DescribeWorkers(lost), lost.size() == 1 ? " has" : " have",
      " left the job (", baseline_->workers_size(), " workers in epoch ", baseline_->epoch(),
      ", now ", state.workers_size(), "); step ", step,
      " and every later one fail until the training processes register their buffers again "
      "(a new run)"));
}

void MembershipGuard::Completed(uint64_t epoch, const std::string& self_id,
                                gift::v1::PushPullResponse* response) {
  absl::MutexLock lock(&mu_);
  auto it = by_epoch_.find(epoch);
  if (it == by_epoch_.end()) return;  // not observed: keep the old baseline
  std::shared_ptr<const gift::v1::ClusterState> now = it->second;
  if (baseline_ != nullptr && baseline_->epoch() != epoch) {
    const std::vector<gift::v1::Member> lost = LostWorkers(*baseline_, *now, self_name_);
    if (!lost.empty() || baseline_->workers_size() != now->workers_size()) {
      response->set_previous_world_size(static_cast<uint32_t>(baseline_->workers_size()));
      for (const gift::v1::Member& m : lost) {
        gift::v1::Member* out = response->add_lost_members();
        out->set_member_id(m.member_id());
        out->set_name(m.name());
        out->set_rank(m.rank());
        out->set_node(m.node());
        out->set_role(m.role());
      }
      Log(Level::kWarning, "world_size_changed",
          {{"step", response->step()},
           {"previous_world_size", baseline_->workers_size()},
           {"world_size", now->workers_size()},
           {"lost", DescribeWorkers(lost)}});
    }
  }
  baseline_ = std::move(now);
  self_name_ = NameOf(*baseline_, self_id);
}

void MembershipGuard::Reset() {
  absl::MutexLock lock(&mu_);
  baseline_ = nullptr;
  self_name_.clear();
}

}  // namespace gift::worker
