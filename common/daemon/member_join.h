// The join of a member daemon (gift-server, gift-worker): its member session
// with the coordinator of its --coordinator flag, over the channel its TLS
// flags ask for, and the `joined` log line.
//
//   control::MemberSessionOptions options;
//   options.role = gift::v1::MEMBER_ROLE_SERVER;
//   options.data_address = shard->address();
//   auto session = JoinCluster(member, credentials->channel, std::move(options), "shard");
//   if (!session.ok()) return daemon.Fail(session.status().message());
//
// Kept apart from gift_daemon (library gift_daemon_member) so that the
// coordinator does not link the member session.
//
// Thread safety: plain function; the session it returns is thread-safe
// (common/control/member_session.h).
#ifndef GIFT_COMMON_DAEMON_MEMBER_JOIN_H_
#define GIFT_COMMON_DAEMON_MEMBER_JOIN_H_

#include <grpcpp/security/credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/control/member_session.h"
#include "common/daemon/daemon_flags.h"

namespace gift::daemon {

// Starts the member session of `options` (its name set from `flags.name`)
// with `flags.coordinator` over `channel_credentials`, and logs `joined`
// {coordinator, member_id, <rank_field>: the rank}. On failure the session's
// status code with the message "joining <coordinator>: <status>".
absl::StatusOr<std::unique_ptr<control::MemberSession>> JoinCluster(
    const MemberFlags& flags, const std::shared_ptr<grpc::ChannelCredentials>& channel_credentials,
    control::MemberSessionOptions options, absl::string_view rank_field);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_MEMBER_JOIN_H_
