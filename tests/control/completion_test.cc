// The generated bash completion, run by a real bash: the script is sourced
// and its function called with COMP_WORDS/COMP_CWORD as bash would set them.
#include "tools/giftctl/completion.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/temp_dir.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tools/giftctl/giftctl.h"

namespace gift::giftctl {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class CompletionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/bin/bash", X_OK) != 0) GTEST_SKIP() << "no /bin/bash";
    // ctest runs each test in its own process, in parallel: every test needs
    // a directory of its own for the script it writes and sources.
    absl::StatusOr<TempDir> dir = TempDir::Create("completion-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(*std::move(dir));
    app_.fallthrough();
    app_.require_subcommand(1, 1);
    app_.add_option("--coordinator", coordinator_, "address");
    app_.add_option("--timeout", timeout_, "deadline");
    app_.add_flag("--json", json_, "JSON");
    app_.add_option("--config", config_, "a file");
    app_.add_subcommand("status", "summary");
    CLI::App* policy = app_.add_subcommand("policy", "the policy");
    policy->add_subcommand("get", "print");
    CLI::App* set = policy->add_subcommand("set", "change");
    set->add_option("--rank", rank_, "r");
    set->add_flag("--clear", clear_, "clear");
    script_ = dir_->File("completion.bash");
    std::ofstream(script_) << BashCompletionScript(app_);
  }

  // What the completion offers for the command line `words` with the cursor
  // on the last word (an empty last word: after a space).
  std::vector<std::string> Complete(const std::vector<std::string>& words) {
    return CompleteWith(script_, "_prog", words);
  }

  std::vector<std::string> CompleteWith(const std::string& script,
                                               const std::string& function,
                                               const std::vector<std::string>& words) {
    std::vector<std::string> quoted;
    for (const std::string& w : words) quoted.push_back(ShellQuote(w));
    const std::string command = absl::StrCat(
        "/bin/bash -c ",
        ShellQuote(absl::StrCat("cd ", ShellQuote(dir_->path()), " && source ",
                                ShellQuote(script), " && COMP_WORDS=(", absl::StrJoin(quoted, " "),
                                ") && COMP_CWORD=", words.size() - 1, " && ", function,
                                " && printf '%s\\n' \"${COMPREPLY[@]}\"")));
    FILE* pipe = popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while (pipe != nullptr && (n = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
      out.append(buf.data(), n);
    }
    EXPECT_EQ(pclose(pipe), 0) << command;
    std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
    return lines;
  }

  CLI::App app_{"test program", "prog"};
  std::string coordinator_, config_;
  double timeout_ = 0;
  bool json_ = false, clear_ = false;
  int rank_ = 0;
  std::optional<TempDir> dir_;
  std::string script_;
};

TEST_F(CompletionTest, OffersSubcommandsAndOptionsOfTheProgram) {
  EXPECT_EQ(Complete({"prog", "po"}), std::vector<std::string>{"policy"});
  EXPECT_EQ(Complete({"prog", "--ti"}), std::vector<std::string>{"--timeout"});
  const std::vector<std::string> all = Complete({"prog", ""});
  EXPECT_NE(std::find(all.begin(), all.end(), "status"), all.end());
  EXPECT_NE(std::find(all.begin(), all.end(), "--json"), all.end());
}

TEST_F(CompletionTest, FollowsTheSubcommandPath) {
  EXPECT_EQ(Complete({"prog", "policy", ""}),
            (std::vector<std::string>{"get", "set", "--help", "--coordinator", "--timeout",
                                      "--json", "--config"}));
  EXPECT_EQ(Complete({"prog", "policy", "set", "--r"}), std::vector<std::string>{"--rank"});
  // The parent's options fall through to the subcommands.
  EXPECT_EQ(Complete({"prog", "policy", "set", "--js"}), std::vector<std::string>{"--json"});
}

TEST_F(CompletionTest, SkipsOptionValuesWhenFindingThePath) {
  // "policy" after --coordinator is its value, not the subcommand.
  EXPECT_EQ(Complete({"prog", "--coordinator", "policy", "st"}),
            std::vector<std::string>{"status"});
  EXPECT_EQ(Complete({"prog", "--timeout", "2s", "policy", "g"}), std::vector<std::string>{"get"});
}

TEST_F(CompletionTest, OffersFilesForFileOptionsAndNothingForOtherValues) {
  std::ofstream(dir_->File("completion-config-probe.toml")) << "";
  EXPECT_EQ(Complete({"prog", "--config", "completion-config-pro"}),
            std::vector<std::string>{"completion-config-probe.toml"});
  EXPECT_TRUE(Complete({"prog", "--timeout", ""}).empty());
}

TEST_F(CompletionTest, GiftctlPrintsAWorkingScriptOfItsOwnCommands) {
  std::ostringstream out, err;
  ASSERT_EQ(giftctl::Run({"giftctl", "completion", "bash"}, "127.0.0.1:1", out, err), 0) << err.str();
  const std::string script = dir_->File("giftctl.bash");
  std::ofstream(script) << out.str();
  EXPECT_EQ(CompleteWith(script, "_giftctl", {"giftctl", "pol"}),
            std::vector<std::string>{"policy"});
  EXPECT_EQ(CompleteWith(script, "_giftctl", {"giftctl", "policy", "set", "--ra"}),
            std::vector<std::string>{"--rank"});
  EXPECT_EQ(CompleteWith(script, "_giftctl", {"giftctl", "--timeout", "2s", "dr"}),
            std::vector<std::string>{"drain"});
  std::ostringstream out2, err2;
  EXPECT_EQ(giftctl::Run({"giftctl", "completion", "zsh"}, "127.0.0.1:1", out2, err2), 64);
}

}  // namespace
}  // namespace gift::giftctl
