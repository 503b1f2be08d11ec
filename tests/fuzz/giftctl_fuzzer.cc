// Fuzzes giftctl's command line (tools/giftctl/giftctl.h Run), above all the
// `policy set` flags and their parsing into a PolicyEdit
// (tools/giftctl/policy_edit.h: the enum names, codec specs, ranges,
// ValidatePolicyEdit, ApplyPolicyEdit), against an in-process coordinator on
// a Unix socket, so that a command that parses really runs: GetPolicy,
// ApplyPolicyEdit, SetPolicy (which validates the result), and the printing
// of every other command. Input: the words after "giftctl", one per line.
// Run never throws and returns one of its exit codes.
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/fuzz/fuzz_flags.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/inproc_coordinator.h"
#include "tools/giftctl/giftctl.h"

namespace {
constexpr size_t kMaxWords = 64;
constexpr int kMaxOverrides = 8;
}  // namespace

GIFT_FUZZ_LIGHT_ASAN_STACKS()

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  gift::fuzz::PrependDefaultFlags(argc, argv, {"-detect_leaks=0", "-entropic=0", "-reload=0"});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gift::fuzz::InprocCoordinator* coordinator =
      new gift::fuzz::InprocCoordinator({.listen_on_unix_socket = true});
  std::vector<std::string> args = {"giftctl"};
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  bool health = false;
  for (absl::string_view word : absl::StrSplit(input, '\n')) {
    // The coordinator is this process's; a fuzzed address could dial out.
    if (absl::StartsWith(word, "--coordinator")) continue;
    if (health && !absl::StartsWith(word, "-") &&
        !(absl::StartsWith(args.back(), "--") && !absl::StrContains(args.back(), '='))) {
      // `health TARGET`: the same, so the target is this coordinator
      // (any other would be a dial out, or a name to resolve).
      args.emplace_back(coordinator->address());
    } else {
      args.emplace_back(word);
    }
    if (word == "health") health = true;
    if (args.size() > kMaxWords) return 0;
  }
  // Every `policy set --tensor GLOB` adds an override that later inputs
  // copy and print: the coordinator's policy grows with the campaign and
  // each input slows down (exec/s fell from 1,078 to 485 in four 25 s runs
  // over a growing corpus). A fresh coordinator once it holds a few.
  if (coordinator->state()->GetPolicy().overrides_size() > kMaxOverrides) coordinator->Reset();
  std::ostringstream out, err;
  const int code = gift::giftctl::Run(args, coordinator->address(), out, err);
  switch (code) {
    case gift::giftctl::kExitOk:
    case gift::giftctl::kExitError:
    case gift::giftctl::kExitUsage:
    case gift::giftctl::kExitTempFail:
      break;
    case gift::giftctl::kExitUnavailable:
      // Only a deadline the input chose makes the in-process coordinator
      // unreachable; anything else is a broken call path.
      if (input.find("--timeout") == absl::string_view::npos) {
        std::fprintf(stderr, "%s", err.str().c_str());
        gift::fuzz::Fail("giftctl could not reach the in-process coordinator");
      }
      break;
    default:
      std::fprintf(stderr, "exit %d: %s", code, err.str().c_str());
      gift::fuzz::Fail("giftctl returned an exit code outside its contract");
  }
  return 0;
}
