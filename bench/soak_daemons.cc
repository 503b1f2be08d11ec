#include "bench/soak_daemons.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

namespace gift::bench {

std::vector<DaemonSpan> DaemonSpans(const std::vector<DaemonSample>& samples, double run_s) {
  std::map<std::pair<std::string, int>, double> started;
  for (const DaemonSample& s : samples) started.try_emplace({s.daemon, s.pid}, s.t_s);
  std::map<std::pair<std::string, int>, DaemonSpan> spans;
  for (const DaemonSample& s : samples) {
    const double warm = std::max(run_s / 10, started[{s.daemon, s.pid}] + kProcessWarmUpS);
    if (s.t_s < warm || s.rss_kib < 0) continue;
    auto [it, first] = spans.try_emplace({s.daemon, s.pid});
    if (first) it->second = {.daemon = s.daemon, .pid = s.pid, .first = s};
    it->second.last = s;
  }
  std::vector<DaemonSpan> out;
  out.reserve(spans.size());
  for (auto& [key, span] : spans) out.push_back(std::move(span));
  return out;
}

std::vector<DaemonVerdict> JudgeDaemons(const std::vector<DaemonSpan>& spans,
                                        const FlatnessRule& rule) {
  std::map<std::string, DaemonVerdict> by_name;
  for (const DaemonSpan& span : spans) {
    DaemonVerdict& v = by_name[span.daemon];
    v.daemon = span.daemon;
    ++v.processes;
    if (span.seconds() < rule.min_span_s) continue;
    ++v.judged;
    const double rss =
        span.first.rss_kib > 0
            ? static_cast<double>(span.last.rss_kib) / static_cast<double>(span.first.rss_kib) - 1
            : 0;
    const int fds = span.last.fds - span.first.fds;
    if (std::abs(rss) > std::abs(v.rss_change)) v.rss_change = rss;
    if (std::abs(fds) > std::abs(v.fd_change)) v.fd_change = fds;
    const bool rss_flat = std::abs(rss) <= rule.tolerance;
    const bool fds_flat = std::abs(fds) <= rule.tolerance * std::max(span.first.fds, 1);
    v.flat = v.flat && rss_flat && fds_flat;
  }
  std::vector<DaemonVerdict> out;
  out.reserve(by_name.size());
  for (auto& [name, v] : by_name) out.push_back(std::move(v));
  return out;
}

}  // namespace gift::bench
