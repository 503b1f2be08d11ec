// An in-process cluster member over real UCX on loopback, as the aggregator
// tests use them: a worker (a PushPullEngine and a MemberSession joined to a
// coordinator with the engine's data address).
//
//   auto coordinator = tools::CoordinatorProcess::Start(...);
//   absl::StatusOr<test::UcxWorker> w =
//       test::StartUcxWorker((*coordinator)->address(), "worker-0");
//   ASSERT_TRUE(w.ok()) << w.status();
//   w->engine->Run(plan);
//
// Ownership: a UcxWorker owns its engine and session; destroying it closes
// the session first (it is declared last), then the engine, whose
// destructor waits for pushes in flight. No process is started: the
// coordinator and servers belong to the caller. Thread safety: as
// PushPullEngine and MemberSession (each may be used from any thread).
#ifndef GIFT_TESTS_TESTING_UCX_MEMBER_H_
#define GIFT_TESTS_TESTING_UCX_MEMBER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/control/member_session.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::test {

struct UcxWorker {
  std::unique_ptr<worker::PushPullEngine> engine;
  std::unique_ptr<control::MemberSession> session;
};

// A push-pull engine over a UCX transport (steps time out after
// `step_timeout`) and a worker session named `name` that joined the
// coordinator at `coordinator` ("127.0.0.1:PORT") with the engine's address.
// `session_options` (name, data address set here) may set the session's
// other options, e.g. its dataplane_macs. Fails with the engine's or the
// Join's status.
absl::StatusOr<UcxWorker> StartUcxWorker(const std::string& coordinator, const std::string& name,
                                         absl::Duration step_timeout = absl::Seconds(30),
                                         control::MemberSessionOptions session_options = {});

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_UCX_MEMBER_H_
