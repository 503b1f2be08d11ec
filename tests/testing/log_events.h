// Readiness waits on a daemon's JSON log lines (common/base/logging.h: one
// object a line with an "event" field) as a tools::Subprocess captures
// them.
//
//   auto server = tools::Subprocess::Start({GIFT_SERVER_BIN, ...});
//   std::string metrics = test::EventField(**server, "metrics_listening", "address");
//
// Ownership: the caller owns the process; nothing here starts or kills one.
// Thread safety: as Subprocess::WaitForLine (any thread).
#ifndef GIFT_TESTS_TESTING_LOG_EVENTS_H_
#define GIFT_TESTS_TESTING_LOG_EVENTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::test {

// The first line (seen before the call or within `timeout`) of the event
// named `event` that also contains each of `contains` verbatim.
// DEADLINE_EXCEEDED or FAILED_PRECONDITION (the output ended) as
// Subprocess::WaitForLine.
absl::StatusOr<std::string> WaitForEvent(tools::Subprocess& process, const std::string& event,
                                         const std::vector<std::string>& contains = {},
                                         absl::Duration timeout = absl::Seconds(30));

// The string field `field` of the first event named `event`; "" when no such
// line comes within 30 s or it has no such string field.
std::string EventField(tools::Subprocess& process, const std::string& event,
                       const std::string& field);

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_LOG_EVENTS_H_
