#include "tests/testing/ucx_member.h"

#include <utility>

#include "common/control/coordinator_client.h"
#include "common/transport/ucx/ucx_transport.h"

namespace gift::test {

absl::StatusOr<UcxWorker> StartUcxWorker(const std::string& coordinator, const std::string& name,
                                         absl::Duration step_timeout,
                                         control::MemberSessionOptions options) {
  auto engine = worker::PushPullEngine::Create(
      [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); },
      {.timeout = step_timeout});
  if (!engine.ok()) return engine.status();
  options.name = name;
  options.data_address = (*engine)->address();
  auto session =
      control::MemberSession::Start(control::CoordinatorClient::MakeChannel(coordinator), options);
  if (!session.ok()) return session.status();
  return UcxWorker{.engine = *std::move(engine), .session = *std::move(session)};
}

}  // namespace gift::test
