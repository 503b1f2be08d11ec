// How a member is named wherever a person reads about it (worker logs and
// errors, giftctl): "rank 1 (worker-1, m4 on node-b)", with `detail` added
// inside the parentheses: "rank 1 (worker-1, m4 on node-b, last step 11)".
//
// Thread safety: a pure function.
#ifndef GIFT_COMMON_CONTROL_MEMBER_TEXT_H_
#define GIFT_COMMON_CONTROL_MEMBER_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "gift/v1/cluster.pb.h"

namespace gift::control {

std::string DescribeMember(const gift::v1::Member& member, absl::string_view detail = "");

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_MEMBER_TEXT_H_
