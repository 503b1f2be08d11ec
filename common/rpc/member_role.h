// The name of a cluster member's role (gift.v1.MemberRole), as the
// coordinator's log and errors and giftctl's tables write it. The role a
// certificate carries is another enum with its own name function
// (rpc::RoleName, common/rpc/credentials.h).
//
// Thread safety: plain function.
#ifndef GIFT_COMMON_RPC_MEMBER_ROLE_H_
#define GIFT_COMMON_RPC_MEMBER_ROLE_H_

#include "absl/strings/string_view.h"
#include "gift/v1/cluster.pb.h"

namespace gift::rpc {

// "worker", "server", or "unspecified" (MEMBER_ROLE_UNSPECIFIED and values
// this build does not know).
absl::string_view MemberRoleName(gift::v1::MemberRole role);

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_MEMBER_ROLE_H_
