// How gift-bench subcommands plug into main: each one registers a CLI11
// subcommand (with its options) and returns the function that runs it.
#ifndef GIFT_BENCH_COMMAND_H_
#define GIFT_BENCH_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace gift::bench {

struct Command {
  CLI::App* app = nullptr;  // owned by the parent CLI::App
  // Runs the subcommand with the options parsed into it. Called at most once,
  // after a successful parse, when `*app` was given on the command line.
  std::function<absl::Status()> run;
  // The exit status of gift-bench when `run` fails; null: 1. For a
  // subcommand whose callers must tell a skip from a failure (gpu-share
  // answers 2 when there is no CUDA device).
  std::function<int(const absl::Status&)> exit_code;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_COMMAND_H_
