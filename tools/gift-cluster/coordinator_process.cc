#include "tools/gift-cluster/coordinator_process.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gift::tools {

namespace {

// The address of a `listening` log line, or "" for any other line.
std::string ListeningAddress(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("event", "") != "listening") return "";
  return j.value("address", "");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const CoordinatorProcessOptions& options) {
  std::vector<std::string> argv = {options.binary, "--listen", options.listen};
  if (!options.state_file.empty()) {
    argv.push_back("--state");
    argv.push_back(options.state_file);
  }
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  argv.insert(argv.begin(), options.prefix.begin(), options.prefix.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(argv, options.subprocess);
  if (!process.ok()) return process.status();
  absl::StatusOr<std::string> line = (*process)->WaitForLine(
      [](const std::string& l) { return !ListeningAddress(l).empty(); }, options.startup_timeout);
  if (!line.ok()) {
    return absl::Status(
        line.status().code(),
        absl::StrCat(options.binary, " did not report `listening`: ", line.status().message(),
                     "; its output:\n", (*process)->stderr_text(), (*process)->stdout_text()));
  }
  return std::unique_ptr<CoordinatorProcess>(
      new CoordinatorProcess(*std::move(process), ListeningAddress(*line)));
}

absl::Status CoordinatorProcess::Kill() {
  absl::Status signalled = process_->Signal(SIGKILL);
  if (!signalled.ok()) return signalled;
  return process_->WaitForExit(absl::Seconds(10)).status();
}

absl::Status CoordinatorProcess::Stop(absl::Duration grace) {
  // A child that already exited (e.g. the signal reached its whole process
  // group) is judged by its exit code below.
  process_->Signal(SIGTERM).IgnoreError();
  absl::StatusOr<int> code = process_->WaitForExit(grace);
  if (!code.ok()) {
    process_->Signal(SIGKILL).IgnoreError();
    process_->WaitForExit(absl::Seconds(10)).IgnoreError();
    return absl::DeadlineExceededError(absl::StrCat("gift-coordinator did not exit within ",
                                                    absl::FormatDuration(grace),
                                                    " of SIGTERM; killed"));
  }
  if (*code != 0) {
    return absl::InternalError(absl::StrCat("gift-coordinator exited with ", *code,
                                            " after SIGTERM; its output:\n", log()));
  }
  return absl::OkStatus();
}

}  // namespace gift::tools
