// Shell completion for a CLI11 command line, generated from the App itself
// (its subcommands, their options and which options take a value), so the
// completion can never disagree with the parser.
//
//   giftctl completion bash > /etc/bash_completion.d/giftctl
//   source <(giftctl completion bash)
//
// The bash script defines one function, _<program>, registered with
// `complete -F`. It walks the words before the cursor to find the subcommand
// path (skipping the value after an option that takes one), then offers that
// path's subcommands and options (and, where the App falls through to its
// parents, the parents' options); after an option that takes a value it
// offers file names when the option names a file or directory (its long
// name is --config, --cert, --key, --ca, --dir, --state, --socket, --out or
// ends in -file / -dir), else nothing.
//
// Thread safety: a plain function over a const App.
#ifndef GIFT_TOOLS_GIFTCTL_COMPLETION_H_
#define GIFT_TOOLS_GIFTCTL_COMPLETION_H_

#include <string>

#include "CLI/CLI.hpp"

namespace gift::giftctl {

// The bash completion script for `app`, whose name (App::get_name) is the
// program's name; it must be a shell word ([A-Za-z0-9_.-]+).
std::string BashCompletionScript(const CLI::App& app);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_COMPLETION_H_
