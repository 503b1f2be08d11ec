#include "common/rpc/role_check.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"

namespace gift::rpc {

grpc::Status CheckRole(const grpc::ServerContextBase& context, absl::string_view rpc,
                       std::initializer_list<Role> allowed) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !IsTlsPeer(*auth)) return grpc::Status::OK;
  const std::optional<Role> role = PeerRole(*auth);
  if (role.has_value() && std::find(allowed.begin(), allowed.end(), *role) != allowed.end()) {
    return grpc::Status::OK;
  }
  std::vector<std::string> names;
  for (Role r : allowed) names.emplace_back(RoleName(r));
  const std::string role_name =
      role.has_value() ? absl::StrCat("role ", RoleName(*role))
                       : absl::StrCat("a certificate without a ", kRoleUriPrefix, "<role> URI");
  const std::string message =
      absl::StrCat(role_name, " may not call ", rpc,
                   " (allowed: ", names.empty() ? "none" : absl::StrJoin(names, ", "), ")");
  logging::Log(logging::Level::kWarning, "rpc_denied",
               {{"rpc", rpc},
                {"role", role.has_value() ? RoleName(*role) : "none"},
                {"peer", context.peer()}});
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message);
}

}  // namespace gift::rpc
