#include "common/rpc/member_role.h"

namespace gift::rpc {

absl::string_view MemberRoleName(gift::v1::MemberRole role) {
  switch (role) {
    case gift::v1::MEMBER_ROLE_WORKER:
      return "worker";
    case gift::v1::MEMBER_ROLE_SERVER:
      return "server";
    default:
      return "unspecified";
  }
}

}  // namespace gift::rpc
