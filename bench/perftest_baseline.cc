#include "bench/perftest_baseline.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::bench {
namespace {

// Whether some process listens on TCP `port` (IPv4 or IPv6), from /proc.
bool Listening(int port) {
  const std::string suffix = absl::StrFormat(":%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st ...; st 0A is LISTEN.
      if (f.size() > 3 && f[3] == "0A" && absl::EndsWith(f[1], suffix)) return true;
    }
  }
  return false;
}

absl::Status WaitListening(int port, tools::Subprocess& process, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!Listening(port)) {
    if (process.WaitForExit(absl::ZeroDuration()).ok()) {
      return absl::UnavailableError("it exited");
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("nothing listens on port ", port, " after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));  // polling /proc, not a guess at readiness
  }
  return absl::OkStatus();
}

std::vector<std::string> WithTls(const std::string& tls, std::vector<std::string> argv) {
  if (tls.empty()) return argv;
  argv.insert(argv.begin(), {"/usr/bin/env", absl::StrCat("UCX_TLS=", tls)});
  return argv;
}

}  // namespace

PerftestResult RunPerftest(const PerftestOptions& o, const std::string& label, uint64_t bytes) {
  PerftestResult r{.label = label, .message_bytes = bytes};
  r.iterations =
      o.iterations > 0
          ? o.iterations
          : static_cast<int>(std::clamp<uint64_t>((uint64_t{256} << 20) / bytes, 20, 2000));
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) {
    r.error = port.status().ToString();
    return r;
  }
  auto server = tools::Subprocess::Start(WithTls(o.ucx_tls, {o.binary, "-p", absl::StrCat(*port)}));
  if (!server.ok()) {
    r.error = absl::StrCat("starting the server: ", server.status().ToString());
    return r;
  }
  // ucx_perftest's stdout is block-buffered into our pipe, so its "Waiting
  // for connection" line only shows at exit: wait for the listening socket.
  if (absl::Status listening = WaitListening(*port, **server, absl::Seconds(20)); !listening.ok()) {
    r.error = absl::StrCat("the server did not listen: ", listening.message(), "; ",
                           OutputTail((*server)->stdout_text() + (*server)->stderr_text()));
    return r;
  }
  auto client = tools::Subprocess::Start(
      WithTls(o.ucx_tls, {o.binary, "127.0.0.1", "-p", absl::StrCat(*port), "-t", "tag_bw", "-s",
                          absl::StrCat(bytes), "-n", absl::StrCat(r.iterations)}));
  if (!client.ok()) {
    r.error = absl::StrCat("starting the client: ", client.status().ToString());
    return r;
  }
  absl::StatusOr<int> code = (*client)->WaitForExit(absl::Seconds(120));
  (void)(*server)->WaitForExit(absl::Seconds(10));  // it exits after one test
  const std::string out = (*client)->stdout_text();
  if (!code.ok() || *code != 0) {
    r.error = absl::StrCat("client ",
                           code.ok() ? absl::StrCat("exited ", *code) : code.status().ToString(),
                           ": ", OutputTail(out + (*client)->stderr_text()));
    return r;
  }
  // "Final: ITER P50 AVG_OVERHEAD OVERALL_OVERHEAD BW_AVG BW_OVERALL MSGRATE_AVG MSGRATE_OVERALL"
  // with bandwidth in MB/s, where UCX's MB is 2^20 bytes.
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    const size_t at = line.find("Final:");
    if (at == absl::string_view::npos) continue;
    std::vector<double> numbers;
    for (absl::string_view field :
         absl::StrSplit(line.substr(at + 6), absl::ByAnyChar(" \t|"), absl::SkipEmpty())) {
      double v;
      if (absl::SimpleAtod(field, &v)) numbers.push_back(v);
    }
    if (numbers.size() >= 6 && std::isfinite(numbers[5]) && numbers[5] > 0) {
      r.bytes_per_s = numbers[5] * 1048576.0;
      return r;
    }
  }
  r.error = absl::StrCat("no bandwidth in its output: ", OutputTail(out));
  return r;
}

}  // namespace gift::bench
