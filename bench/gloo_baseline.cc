#include "bench/gloo_baseline.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::bench {
namespace {

using json = nlohmann::json;

std::string DefaultGlooScript() {
#ifdef GIFT_BENCH_SOURCE_DIR
  const std::string in_source = GIFT_BENCH_SOURCE_DIR "/gloo_allreduce.py";
  if (access(in_source.c_str(), R_OK) == 0) return in_source;
#endif
  // Installed: share/gift/gloo_allreduce.py next to bin/.
  const std::filesystem::path self = SelfPath();
  return (self.parent_path().parent_path() / "share/gift/gloo_allreduce.py").string();
}

}  // namespace

GlooResult RunGloo(const GlooOptions& o, const std::vector<ModelTensor>& tensors, int steps,
                   int warmup) {
  GlooResult g;
  if (access(o.python.c_str(), X_OK) != 0) {
    g.skipped = absl::StrCat(o.python, " is not executable");
    return g;
  }
  const std::string script = o.script.empty() ? DefaultGlooScript() : o.script;
  if (access(script.c_str(), R_OK) != 0) {
    g.skipped = absl::StrCat("no gloo script at ", script, " (pass --gloo-script)");
    return g;
  }
  // Placed ranks: rank 0's host is a namespace of its own, any port is free.
  absl::StatusOr<int> port = o.placement_file.empty() ? FreePort() : absl::StatusOr<int>(29500);
  if (!port.ok()) {
    g.skipped = port.status().ToString();
    return g;
  }
  json shapes = json::array();
  for (const ModelTensor& t : tensors) shapes.push_back(t.shape);
  std::vector<std::string> argv = {o.python,   script,
                                   "--world",  absl::StrCat(o.world),
                                   "--port",   absl::StrCat(*port),
                                   "--steps",  absl::StrCat(steps),
                                   "--warmup", absl::StrCat(warmup),
                                   "--mode",   o.mode,
                                   "--dtype",  o.dtype,
                                   "--shapes", shapes.dump()};
  if (!o.placement_file.empty()) argv.insert(argv.end(), {"--placement", o.placement_file});
  auto child = tools::Subprocess::Start(argv);
  if (!child.ok()) {
    g.skipped = absl::StrCat("starting ", o.python, ": ", child.status().ToString());
    return g;
  }
  absl::StatusOr<int> code = (*child)->WaitForExit(absl::Seconds(600));
  const std::string out = (*child)->stdout_text();
  if (!code.ok()) {
    (void)(*child)->Signal(SIGKILL);
    g.skipped = absl::StrCat("gloo run did not finish: ", code.status().message());
    return g;
  }
  // The last line of stdout is the JSON report.
  std::string last;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    last = std::string(line);
  }
  json report = json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.is_object()) {
    g.skipped = absl::StrCat("gloo script exited ", *code,
                             " without a JSON report: ", OutputTail(out + (*child)->stderr_text()));
    return g;
  }
  if (report.contains("skipped")) {
    g.skipped = report["skipped"].get<std::string>();
    return g;
  }
  if (*code != 0 || !report.contains("step_seconds")) {
    g.skipped = absl::StrCat(
        "gloo script exited ", *code, ": ",
        report.contains("error") ? report["error"].dump() : OutputTail((*child)->stderr_text()));
    return g;
  }
  // The step time of the collective: the slowest rank's, per step.
  std::vector<double> per_step;
  for (const json& rank_times : report["step_seconds"]) {
    const auto times = rank_times.get<std::vector<double>>();
    if (per_step.empty()) per_step.assign(times.size(), 0.0);
    for (size_t i = 0; i < times.size() && i < per_step.size(); ++i) {
      per_step[i] = std::max(per_step[i], times[i]);
    }
  }
  if (per_step.empty()) {
    g.skipped = "gloo script reported no steps";
    return g;
  }
  g.ran = true;
  g.median_s = Median(per_step);
  g.p90_s = Percentile(per_step, 0.9);
  g.report = std::move(report);
  return g;
}

}  // namespace gift::bench
