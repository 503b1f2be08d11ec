// The coordinator commands of giftctl, one function per command line
// (giftctl.cc parses it and calls them). Each prints its result to ctx.out,
// as a table or, with --json, as JSON, and returns the call's status.
//
//   status_commands.cc   status, members
//   tensors_command.cc   tensors
//   policy_commands.cc   policy get, policy set (the flags of policy set too)
//   refresh_and_drain.cc refresh, rank set, drain
//   run_commands.cc      run, run reset
//
// Thread safety: the functions share no state; a CommandContext is used by
// one command at a time.
#ifndef GIFT_TOOLS_GIFTCTL_COMMANDS_H_
#define GIFT_TOOLS_GIFTCTL_COMMANDS_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/control/coordinator_client.h"
#include "tools/giftctl/policy_edit.h"

// Only pointers to them here: CLI11 is a large header-only library, and the
// command files need none of it (giftctl.cc and policy_commands.cc include it).
namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace gift::giftctl {

struct CommandContext {
  const control::CoordinatorClient& client;
  bool json;  // --json
  std::ostream& out;
};

// `status`: the cluster summary; `address` is the coordinator's as given.
absl::Status StatusCommand(const CommandContext& ctx, const std::string& address);
// `members`: workers and servers with ranks, states and leases.
absl::Status MembersCommand(const CommandContext& ctx);

// `tensors`: registered tensors, their owners, basis versions and ratios.
absl::Status TensorsCommand(const CommandContext& ctx);

// `policy get`.
absl::Status PolicyGetCommand(const CommandContext& ctx);
// `policy set`: read, modify, write with the version read; one retry when
// someone else changed the policy in between (ABORTED).
absl::Status PolicySetCommand(const CommandContext& ctx, const PolicyEdit& edit);

// The flags of `policy set`, as CLI11 fills them.
struct PolicySetFlags {
  std::string tensor;
  uint32_t period = 0;
  uint32_t rank = 0;
  uint32_t collect_period = 0;
  uint32_t direct_collect_stride = 0;
  uint32_t measure_period = 0;
  uint32_t statistics_columns = 0;
  std::vector<double> powers;
  std::string sides, source, residual, selection, hierarchy, on_member_loss, enabled,
      error_feedback, statistics, gift_budget, rotation_block;
  double ema_decay = 0, drift = 0, margin = 0;
  std::string push_codec, pull_codec, statistics_codec, target;
  std::vector<std::string> include, exclude;
  std::map<std::string, CLI::Option*> options;

  // Whether the flag `name` (its long name without "--") was given.
  bool given(const std::string& name) const;
};
// Adds the flags of `policy set` to `cmd`; `flags` must outlive the parse.
void AddPolicySetFlags(CLI::App* cmd, PolicySetFlags* flags);
// The edit the parsed flags ask for, validated (InvalidArgument naming the
// flag; "nothing to change" when none is given).
absl::StatusOr<PolicyEdit> ToPolicyEdit(const PolicySetFlags& flags);

// `refresh [--tensor GLOB]`: ask the basis owners to refresh now.
absl::Status RefreshCommand(const CommandContext& ctx, const std::string& glob);
// `rank set R [--tensor GLOB]`.
absl::Status RankSetCommand(const CommandContext& ctx, uint32_t rank, const std::string& glob);
// `drain WORKER`: WORKER is a member id or a name.
absl::Status DrainCommand(const CommandContext& ctx, const std::string& worker);

// `run`: the current training run. `run reset [--id ID]`: starts a new run
// (ID, or "giftctl-<unix ms>"): the registered tensors are dropped, and the
// training processes that register next begin at their step 0.
absl::Status RunShowCommand(const CommandContext& ctx);
absl::Status RunResetCommand(const CommandContext& ctx, const std::string& run_id);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_COMMANDS_H_
