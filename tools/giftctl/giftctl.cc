// The command line of giftctl: the flags, the subcommands and which command
// function (commands.h) each one calls; the exit codes.
#include "tools/giftctl/giftctl.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/control/coordinator_client.h"
#include "common/policy/policy.h"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/completion.h"
#include "tools/giftctl/connection_flags.h"
#include "tools/giftctl/health_check.h"
#include "tools/giftctl/policy_edit.h"

namespace gift::giftctl {

using control::CoordinatorClient;

std::string DefaultCoordinator() {
  const char* env = std::getenv("GIFT_COORDINATOR");
  return env != nullptr && env[0] != '\0' ? env : "localhost:7070";
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
      return kExitTempFail;
    default:
      return kExitError;
  }
}

namespace {

// Whether the edit distance between `a` and `b` (insertions, deletions,
// substitutions and swaps of neighbours each count one) is at most `limit`.
// Three rolling rows; a length difference above `limit` answers at once
// (fuzzed words run to hundreds of letters).
bool WithinEditDistance(absl::string_view a, absl::string_view b, size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) return false;
  std::vector<size_t> rows(3 * (b.size() + 1));
  size_t* before = rows.data();               // row i - 2
  size_t* previous = before + b.size() + 1;   // row i - 1
  size_t* current = previous + b.size() + 1;  // row i
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      current[j] = std::min(
          {previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);  // the old i - 2 row becomes the next row
    std::swap(previous, current);
  }
  return previous[b.size()] <= limit;
}

// The option `name` of `app` or of an app above it (giftctl's options fall
// through to its subcommands), or null.
const CLI::Option* FindOption(const CLI::App* app, const std::string& name) {
  for (; app != nullptr; app = app->get_parent()) {
    if (const CLI::Option* opt = app->get_option_no_throw(name)) return opt;
  }
  return nullptr;
}

// Whether `word` (of args, after args[0]) is an option of `app` (or of an
// app above it) that takes its value from the next word.
bool TakesNextWord(const CLI::App* app, const std::string& word) {
  if (word.find('=') != std::string::npos) return false;  // "--timeout=2s"
  const CLI::Option* opt = FindOption(app, word);
  return opt != nullptr && opt->get_items_expected_min() > 0;
}

// The first word of `args` that is not an option of `app` or an option's
// value: the command; "" when there is none, after "--", or after a help
// flag (the help of giftctl itself).
std::string CommandWord(const CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--" || word == "-h" || word == "--help") break;
    if (word.size() > 1 && word[0] == '-') {
      if (TakesNextWord(&app, word)) ++i;
      continue;
    }
    return word;
  }
  return "";
}

// The usage error for the first word of `args` (args[0] is the program)
// that stands where `app` expects a command and names none, with the
// commands it is close to; nullopt when every command word is known.
std::optional<std::string> UnknownCommandError(const CLI::App& app,
                                               const std::vector<std::string>& args) {
  const CLI::App* current = &app;
  std::string path = app.get_name();
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    if (word.size() > 1 && word[0] == '-') {
      // An option that takes a value consumes the next word, unless the
      // value is attached ("--timeout=2s").
      if (TakesNextWord(current, word)) ++i;
      continue;
    }
    const std::vector<const CLI::App*> subs =
        current->get_subcommands([](const CLI::App*) { return true; });
    const auto sub = std::find_if(subs.begin(), subs.end(),
                                  [&](const CLI::App* s) { return s->get_name() == word; });
    if (sub != subs.end()) {
      current = *sub;
      path += " " + word;
      continue;
    }
    if (current->get_require_subcommand_min() == 0) return std::nullopt;  // a positional
    std::vector<std::string> names;
    for (const CLI::App* s : subs) names.push_back(s->get_name());
    // Close: a third of the word's letters wrong at most (one for short
    // words), or the start of a command.
    const size_t max_distance = std::max<size_t>(1, word.size() / 3);
    std::vector<std::string> close;
    for (const std::string& name : names) {
      if (WithinEditDistance(word, name, max_distance) || absl::StartsWith(name, word)) {
        close.push_back(name);
      }
    }
    std::string message = absl::StrCat(path, ": unknown command '", word, "'");
    if (!close.empty())
      absl::StrAppend(&message, " (did you mean ", absl::StrJoin(close, " or "), "?)");
    absl::StrAppend(&message, "; the commands are ", absl::StrJoin(names, ", "));
    return message;
  }
  return std::nullopt;
}

int RunOrThrow(const std::vector<std::string>& args, const std::string& default_coordinator,
               std::ostream& out, std::ostream& err) {
  CLI::App app{"giftctl: the operator CLI of the GIFT-PS coordinator.", "giftctl"};
  app.require_subcommand(1, 1);
  app.fallthrough();
  app.footer(
      "Exit codes: 0 ok, 1 the coordinator refused the request (its code and message are "
      "printed), 64 usage error, 69 coordinator (or health TARGET) unavailable or not serving, "
      "75 deadline exceeded or retryable failure.\nRun giftctl COMMAND --help for the options of "
      "each command.");
  ConnectionFlags connection = DefaultConnectionFlags(default_coordinator);
  const std::string& address = connection.address;
  bool as_json = false;
  AddConnectionFlags(app, &connection);
  app.add_flag("--json", as_json, "print JSON instead of tables");

  // Only the command named is built (CLI11 builds each option in time
  // linear in the options before it, which made building every command most
  // of a short command's run); every command when none or an unknown one is
  // named (the top-level help, the suggestions: without `policy set`'s
  // options, below) and for `completion`.
  const std::string command = CommandWord(app, args);
  static constexpr absl::string_view kCommands[] = {"status",  "members",   "tensors", "policy",
                                                    "refresh", "rank",      "drain",   "run",
                                                    "health",  "completion"};
  const bool known =
      std::find(std::begin(kCommands), std::end(kCommands), command) != std::end(kCommands);
  const auto wanted = [&](absl::string_view name) {
    return !known || command == name || command == "completion";
  };
  const auto add = [&](CLI::App* parent, absl::string_view name, const std::string& help) {
    return wanted(name) ? parent->add_subcommand(std::string(name), help) : nullptr;
  };

  CLI::App* status = add(&app, "status", "cluster summary: epoch, members, tensors");
  CLI::App* members = add(&app, "members", "workers and servers with ranks and leases");
  CLI::App* tensors = add(&app, "tensors", "registered tensors, their owners and basis versions");
  CLI::App* policy = add(&app, "policy", "show or change the refresh policy");
  CLI::App* policy_get = nullptr;
  CLI::App* policy_set = nullptr;
  PolicySetFlags policy_flags;
  if (policy != nullptr) {
    policy->require_subcommand(1, 1);
    policy_get = policy->add_subcommand("get", "print the policy");
    policy_set = policy->add_subcommand(
        "set", "change the given fields of the policy (or of one tensor override)");
    // Its 25 options only when they can be used or listed: not for the
    // top-level help or an unknown command's suggestions, which name the
    // commands only (building them was a third of such a run).
    if (known) AddPolicySetFlags(policy_set, &policy_flags);
  }
  CLI::App* refresh = add(&app, "refresh", "ask the basis owners to refresh now");
  std::string refresh_glob;
  if (refresh != nullptr) {
    refresh->add_option("--tensor", refresh_glob, "only tensors whose names match this glob");
  }
  CLI::App* rank = add(&app, "rank", "change the approximation rank r");
  CLI::App* rank_set = nullptr;
  uint32_t rank_value = 0;
  std::string rank_glob;
  if (rank != nullptr) {
    rank->require_subcommand(1, 1);
    rank_set =
        rank->add_subcommand("set", "set r (globally or for a glob) and refresh the tensors");
    rank_set->add_option("R", rank_value, absl::StrCat("the new rank r, 1 to ", policy::kMaxRank))
        ->required()
        ->check(CLI::Range(1u, policy::kMaxRank));
    rank_set->add_option("--tensor", rank_glob, "only tensors whose names match this glob");
  }
  CLI::App* drain = add(&app, "drain", "drain a worker: it leaves after its step");
  std::string drain_target;
  if (drain != nullptr) {
    drain->add_option("WORKER", drain_target, "the member's name or id")->required();
  }
  CLI::App* run = add(&app, "run", "the training run; run reset starts a new one");
  CLI::App* run_reset = nullptr;
  std::string run_id;
  if (run != nullptr) {
    run_reset = run->add_subcommand(
        "reset",
        "start a new training run: drop the registered tensors; the next registrations begin at "
        "step 0 (also in new shapes)");
    run_reset->add_option("--id", run_id, "the new run's id (default: giftctl-<unix ms>)");
  }
  CLI::App* health =
      add(&app, "health",
          "grpc.health.v1 status of a daemon's endpoint (exec probes under mutual TLS)");
  std::string health_target;
  if (health != nullptr) {
    health->add_option("TARGET", health_target,
                       "HOST:PORT or unix:/path (default: the coordinator)");
  }
  CLI::App* completion =
      add(&app, "completion", "print a shell completion script: source <(giftctl completion bash)");
  std::string shell;
  if (completion != nullptr) {
    completion->add_option("SHELL", shell, "the shell (bash)")
        ->required()
        ->check(CLI::IsMember({"bash"}));
  }
  const auto parsed = [](const CLI::App* command) {
    return command != nullptr && command->parsed();
  };

  if (std::optional<std::string> unknown = UnknownCommandError(app, args)) {
    err << *unknown << "\n";
    return kExitUsage;
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // --help prints the help of the (sub)command and exits 0.
    return app.exit(e, out, err) == 0 ? kExitOk : kExitUsage;
  }

  std::optional<PolicyEdit> edit;
  if (parsed(policy_set)) {
    absl::StatusOr<PolicyEdit> parsed = ToPolicyEdit(policy_flags);
    if (!parsed.ok()) {
      err << "giftctl policy set: " << parsed.status().message() << '\n';
      return kExitUsage;
    }
    edit = *std::move(parsed);
  }

  // The globs the coordinator would refuse, refused here (exit 64).
  struct GlobFlag {
    const char* command;
    const CLI::App* app;
    const std::string* glob;
  };
  for (const GlobFlag& g :
       {GlobFlag{"refresh", refresh, &refresh_glob}, GlobFlag{"rank set", rank_set, &rank_glob}}) {
    if (!parsed(g.app) || g.glob->empty()) continue;
    if (absl::Status s = policy::ValidateGlob("--tensor", *g.glob); !s.ok()) {
      err << "giftctl " << g.command << ": " << s.message() << '\n';
      return kExitUsage;
    }
  }

  if (parsed(completion)) {
    out << BashCompletionScript(app);
    return kExitOk;
  }

  const bool health_of_other = parsed(health) && !health_target.empty();
  const std::string target = health_of_other ? health_target : address;
  if (absl::Status s = CheckDialTarget(target); !s.ok()) {
    err << "giftctl: " << (health_of_other ? "health TARGET" : "--coordinator") << " "
        << s.message() << '\n';
    return kExitUsage;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(connection, target);
  if (!channel.ok()) {
    err << "giftctl: " << channel.status().message() << '\n';
    return kExitUsage;
  }
  if (parsed(health)) {
    const absl::Status serving = CheckHealth(*channel, connection.timeout, out);
    if (!serving.ok()) err << "giftctl health " << target << ": " << serving << '\n';
    return ExitCodeFor(serving);
  }
  const CoordinatorClient client(*std::move(channel), connection.timeout);
  const CommandContext ctx{client, as_json, out};
  absl::Status result;
  if (parsed(status)) {
    result = StatusCommand(ctx, address);
  } else if (parsed(members)) {
    result = MembersCommand(ctx);
  } else if (parsed(tensors)) {
    result = TensorsCommand(ctx);
  } else if (parsed(policy_get)) {
    result = PolicyGetCommand(ctx);
  } else if (parsed(policy_set)) {
    result = PolicySetCommand(ctx, *edit);
  } else if (parsed(refresh)) {
    result = RefreshCommand(ctx, refresh_glob);
  } else if (parsed(rank_set)) {
    result = RankSetCommand(ctx, rank_value, rank_glob);
  } else if (parsed(drain)) {
    result = DrainCommand(ctx, drain_target);
  } else if (parsed(run_reset)) {
    result = RunResetCommand(ctx, run_id);
  } else if (parsed(run)) {
    result = RunShowCommand(ctx);
  }
  if (result.ok()) return kExitOk;
  err << "giftctl: " << absl::StatusCodeToString(result.code()) << ": " << result.message();
  if (absl::IsUnavailable(result)) err << " (is the coordinator running at " << address << "?)";
  err << '\n';
  return ExitCodeFor(result);
}

}  // namespace

int Run(const std::vector<std::string>& args, const std::string& default_coordinator,
        std::ostream& out, std::ostream& err) {
  try {
    return RunOrThrow(args, default_coordinator, out, err);
  } catch (const std::exception& e) {
    err << "giftctl: internal error: " << e.what() << '\n';
  } catch (...) {
    err << "giftctl: internal error: unknown exception\n";
  }
  return kExitError;
}

}  // namespace gift::giftctl
