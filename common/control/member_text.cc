#include "common/control/member_text.h"

#include "absl/strings/str_cat.h"

namespace gift::control {

const gift::v1::Member* FindMember(const gift::v1::ClusterState& state,
                                   absl::string_view member_id) {
  for (const auto* members : {&state.workers(), &state.servers()}) {
    for (const gift::v1::Member& m : *members) {
      if (m.member_id() == member_id) return &m;
    }
  }
  return nullptr;
}

std::string DescribeMember(const gift::v1::Member& member, absl::string_view detail) {
  return absl::StrCat("rank ", member.rank(), " (", member.name(), ", ", member.member_id(),
                      member.node().empty() ? "" : absl::StrCat(" on ", member.node()), detail,
                      ")");
}

}  // namespace gift::control
