#include "common/daemon/member_join.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/control/coordinator_client.h"

namespace gift::daemon {

absl::StatusOr<std::unique_ptr<control::MemberSession>> JoinCluster(
    const MemberFlags& flags, const std::shared_ptr<grpc::ChannelCredentials>& channel_credentials,
    control::MemberSessionOptions options, absl::string_view rank_field) {
  options.name = flags.name;
  absl::StatusOr<std::unique_ptr<control::MemberSession>> session = control::MemberSession::Start(
      control::CoordinatorClient::MakeChannel(flags.coordinator, channel_credentials),
      std::move(options));
  if (!session.ok()) {
    return absl::Status(session.status().code(), absl::StrCat("joining ", flags.coordinator, ": ",
                                                              session.status().ToString()));
  }
  logging::Log(logging::Level::kInfo, "joined",
               {{"coordinator", flags.coordinator},
                {"member_id", (*session)->member_id()},
                {rank_field, static_cast<int64_t>((*session)->rank())}});
  return session;
}

}  // namespace gift::daemon
