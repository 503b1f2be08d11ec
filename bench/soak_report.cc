#include "bench/soak_report.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

int64_t RssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      int64_t kib = 0;
      std::sscanf(line.c_str(), "VmRSS: %ld", &kib);
      return kib;
    }
  }
  return -1;
}

int OpenFds(int pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.' ? 1 : 0;
  closedir(dir);
  return n;
}

}  // namespace

DaemonSample SampleDaemon(double t_s, const std::string& daemon, int pid) {
  return {t_s, daemon, pid, RssKib(pid), OpenFds(pid)};
}

int CountLogEvents(const std::string& path, const std::string& event) {
  std::ifstream in(path);
  const std::string needle = absl::StrCat("\"event\":\"", event, "\"");
  int n = 0;
  for (std::string line; std::getline(in, line);) n += absl::StrContains(line, needle) ? 1 : 0;
  return n;
}

void PrintSoakReport(const SoakTotals& totals, const std::vector<SoakFault>& faults,
                     const std::vector<DaemonSample>& samples) {
  std::printf("soak: %.0f s, %llu steps (%llu completed), %zu faults, hierarchy %s\n",
              totals.seconds, static_cast<unsigned long long>(totals.steps),
              static_cast<unsigned long long>(totals.steps_completed), faults.size(),
              totals.hierarchy.c_str());
  std::printf(
      "lost %d, double %d, failed %d, refused without a fault %d, rejoins after a "
      "fault %d, soak.gift max rel error %.4f (bound %.2f, %d over)\n",
      totals.lost, totals.doubled, totals.failed, totals.refused, totals.rejoins,
      totals.gift_max_rel_error, totals.gift_bound, totals.gift_out_of_bound);
  std::map<std::string, std::vector<double>> stalls;
  for (const SoakFault& f : faults) stalls[f.kind].push_back(f.stall_s);
  std::printf("%-22s %6s %12s %12s\n", "fault", "count", "max stall", "median");
  for (auto& [kind, s] : stalls) {
    std::sort(s.begin(), s.end());
    std::printf("%-22s %6zu %11.3fs %11.3fs\n", kind.c_str(), s.size(), s.back(), s[s.size() / 2]);
  }
  // Per daemon name: a restarted daemon is a new process under its name.
  const FlatnessRule rule;
  const std::vector<DaemonVerdict> verdicts =
      JudgeDaemons(DaemonSpans(samples, totals.seconds), rule);
  std::printf("%-14s %9s %7s %10s %10s %5s\n", "daemon", "processes", "judged", "rss change",
              "fds change", "flat");
  bool all_flat = true;
  int judged = 0;
  for (const DaemonVerdict& v : verdicts) {
    if (v.judged == 0) {
      std::printf("%-14s %9d %7d %10s %10s %5s\n", v.daemon.c_str(), v.processes, 0, "-", "-", "-");
      continue;
    }
    std::printf("%-14s %9d %7d %+9.1f%% %+10d %5s\n", v.daemon.c_str(), v.processes, v.judged,
                100 * v.rss_change, v.fd_change, v.flat ? "yes" : "NO");
    all_flat = all_flat && v.flat;
    judged += v.judged;
  }
  std::printf(
      "every daemon flat (each process sampled %.0f s or more after its warm-up ends within "
      "%.0f %% of its first RSS and fds): %s\n",
      rule.min_span_s, 100 * rule.tolerance,
      judged == 0 ? "not judged, no process lived that long (a longer run)"
                  : (all_flat ? "yes" : "NO"));
  std::printf(
      "daemons that exited on their own (restarted): %zu; restarts that failed and were "
      "retried: %d; spoofs that could not be sent: %d; coordinator commits rolled back: %d\n",
      totals.crashes.size(), totals.restart_retries, totals.spoof_errors,
      totals.coordinator_rollbacks);
  for (const std::string& c : totals.crashes) std::printf("  %s\n", c.c_str());
  for (const std::string& e : totals.errors) std::printf("  %s\n", e.c_str());
}

absl::Status WriteSoakJson(const std::string& path, const SoakTotals& totals,
                           const std::vector<SoakFault>& faults,
                           const std::vector<DaemonSample>& samples) {
  nlohmann::json j;
  j["seconds"] = totals.seconds;
  j["hierarchy"] = totals.hierarchy;
  j["steps"] = totals.steps;
  j["steps_completed"] = totals.steps_completed;
  j["lost"] = totals.lost;
  j["double"] = totals.doubled;
  j["failed"] = totals.failed;
  j["refused"] = totals.refused;
  j["rejoins"] = totals.rejoins;
  j["gift_max_rel_error"] = totals.gift_max_rel_error;
  j["gift_out_of_bound"] = totals.gift_out_of_bound;
  j["bad_steps"] = totals.bad_steps;
  j["errors"] = totals.errors;
  j["crashes"] = totals.crashes;
  j["restart_retries"] = totals.restart_retries;
  j["spoof_errors"] = totals.spoof_errors;
  j["coordinator_rollbacks"] = totals.coordinator_rollbacks;
  j["faults"] = nlohmann::json::array();
  for (const SoakFault& f : faults) {
    j["faults"].push_back(
        {{"kind", f.kind}, {"victim", f.victim}, {"step", f.step}, {"stall_s", f.stall_s}});
  }
  const std::vector<DaemonSpan> spans = DaemonSpans(samples, totals.seconds);
  j["spans"] = nlohmann::json::array();
  for (const DaemonSpan& span : spans) {
    j["spans"].push_back({{"daemon", span.daemon},
                          {"pid", span.pid},
                          {"seconds", span.seconds()},
                          {"rss_kib", span.first.rss_kib},
                          {"rss_kib_end", span.last.rss_kib},
                          {"fds", span.first.fds},
                          {"fds_end", span.last.fds}});
  }
  j["daemons"] = nlohmann::json::array();
  for (const DaemonVerdict& v : JudgeDaemons(spans)) {
    j["daemons"].push_back({{"daemon", v.daemon},
                            {"processes", v.processes},
                            {"judged", v.judged},
                            {"rss_change", v.rss_change},
                            {"fd_change", v.fd_change},
                            {"flat", v.flat}});
  }
  j["samples"] = nlohmann::json::array();
  for (const DaemonSample& s : samples) {
    j["samples"].push_back({{"t_s", s.t_s},
                            {"daemon", s.daemon},
                            {"pid", s.pid},
                            {"rss_kib", s.rss_kib},
                            {"fds", s.fds}});
  }
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace gift::bench
