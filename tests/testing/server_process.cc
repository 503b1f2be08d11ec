#include "tests/testing/server_process.h"

#include "absl/strings/str_cat.h"
#include "tests/testing/log_events.h"

namespace gift::test {

absl::StatusOr<std::unique_ptr<tools::Subprocess>> StartServerProcess(
    const ServerProcessOptions& options) {
  std::vector<std::string> argv = {options.binary, "--coordinator", options.coordinator,
                                   "--name",       options.name,     "--threads",
                                   absl::StrCat(options.threads)};
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  return tools::Subprocess::Start(argv);
}

absl::Status WaitForServing(tools::Subprocess& server, uint64_t epoch, std::optional<int> chunks,
                            absl::Duration timeout) {
  std::vector<std::string> contains = {absl::StrCat("\"epoch\":", epoch, ",")};
  if (chunks.has_value()) contains.push_back(absl::StrCat("\"chunks\":", *chunks, "}"));
  return WaitForEvent(server, "serving", contains, timeout).status();
}

}  // namespace gift::test
