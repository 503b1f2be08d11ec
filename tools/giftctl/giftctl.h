// giftctl, the operator CLI of the GIFT-PS coordinator, as a library so that
// tests can run it in-process; main.cc only supplies argv, the environment
// and the standard streams.
//
//   giftctl [--coordinator ADDR] [--timeout DURATION] [--cert F --key F --ca F]
//           [--insecure] [--json] COMMAND ...
//     status | members | tensors | policy get | policy set FLAGS |
//     refresh [--tensor GLOB] | rank set R [--tensor GLOB] | drain WORKER |
//     health [TARGET] | completion bash
//
// Connection flags: tools/giftctl/connection_flags.h.
//
// Thread safety: Run may be called concurrently (no shared state).
#ifndef GIFT_TOOLS_GIFTCTL_GIFTCTL_H_
#define GIFT_TOOLS_GIFTCTL_GIFTCTL_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gift::giftctl {

// Exit codes (sysexits.h numbering).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;         // the coordinator refused the request
inline constexpr int kExitUsage = 64;        // bad command line
inline constexpr int kExitUnavailable = 69;  // coordinator unreachable or shutting down
inline constexpr int kExitTempFail = 75;     // deadline exceeded, ABORTED, RESOURCE_EXHAUSTED

// The address used when --coordinator is not given: $GIFT_COORDINATOR when
// set and nonempty, else localhost:7070.
std::string DefaultCoordinator();

// The exit code for a failed call's status (kExitOk for OK).
int ExitCodeFor(const absl::Status& status);

// Runs one command line; `args[0]` is the program name. Results go to `out`,
// diagnostics to `err`. Returns the exit code; never throws.
int Run(const std::vector<std::string>& args, const std::string& default_coordinator,
        std::ostream& out, std::ostream& err);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_GIFTCTL_H_
