#include "common/control/member_text.h"

#include "absl/strings/str_cat.h"

namespace gift::control {

std::string DescribeMember(const gift::v1::Member& member, absl::string_view detail) {
  return absl::StrCat("rank ", member.rank(), " (", member.name(), ", ", member.member_id(),
                      member.node().empty() ? "" : absl::StrCat(" on ", member.node()), detail,
                      ")");
}

}  // namespace gift::control
