// A member of a cluster state: found by its id, and named the way a person
// reads about it (worker logs and errors, giftctl).
//
// Thread safety: pure functions.
#ifndef GIFT_COMMON_CONTROL_MEMBER_TEXT_H_
#define GIFT_COMMON_CONTROL_MEMBER_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "gift/v1/cluster.pb.h"

namespace gift::control {

// The member `member_id` of `state` (a worker or a server), or null. The
// pointer is into `state` and lives as long as it is unchanged.
const gift::v1::Member* FindMember(const gift::v1::ClusterState& state,
                                   absl::string_view member_id);

// "rank 1 (worker-1, m4 on node-b)", with `detail` added inside the
// parentheses: "rank 1 (worker-1, m4 on node-b, last step 11)".
std::string DescribeMember(const gift::v1::Member& member, absl::string_view detail = "");

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_MEMBER_TEXT_H_
