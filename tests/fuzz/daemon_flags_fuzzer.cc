// Fuzzes daemon::ParseDaemonFlags (common/daemon/daemon_flags.h) with a TOML
// config file written from the input, over the flags a daemon declares (the
// kinds gift-coordinator and gift-worker use: strings, integers, a float, a
// flag, a vector), then the checks daemons run on the values
// (ParseDurationFlag, CheckHostPort). Input: the config file text; after an
// optional NUL byte, extra command-line words, one per line.
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/daemon/daemon_flags.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

// The config file, in memory (a memfd named by its /proc path), so that no
// file is left behind however the fuzzer exits.
struct ConfigFile {
  int fd;
  std::string path;
};

const ConfigFile& Config() {
  static const ConfigFile* file = [] {
    const int fd = memfd_create("gift-fuzz-daemon-flags.toml", MFD_CLOEXEC);
    if (fd < 0) gift::fuzz::Fail("memfd_create");
    return new ConfigFile{fd, absl::StrCat("/proc/self/fd/", fd)};
  }();
  return *file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string config = input.substr(0, nul);
  if (ftruncate(Config().fd, 0) != 0 ||
      pwrite(Config().fd, config.data(), config.size(), 0) != static_cast<ssize_t>(config.size())) {
    gift::fuzz::Fail("cannot write the config file");
  }
  std::vector<std::string> args = {"gift-fuzz", "--config", Config().path};
  if (nul != std::string::npos) {
    for (absl::string_view word : absl::StrSplit(absl::string_view(input).substr(nul + 1), '\n')) {
      args.emplace_back(word);
    }
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());

  CLI::App app("gift-fuzz: the flags of a daemon");
  std::string listen = "0.0.0.0:7070", lease_ttl = "10s", state = "/var/lib/gift/state.db";
  int threads = 0;
  uint64_t step_window = 8;
  uint32_t min_workers = 1;
  double ratio = 0.5;
  bool verbose = false;
  std::vector<std::string> peers;
  app.add_option("--listen", listen, "address")->capture_default_str();
  app.add_option("--lease-ttl", lease_ttl, "duration")->capture_default_str();
  app.add_option("--state", state, "file")->capture_default_str();
  app.add_option("--threads", threads, "threads")->capture_default_str();
  app.add_option("--step-window", step_window, "steps")->capture_default_str();
  app.add_option("--min-workers", min_workers, "workers")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--ratio", ratio, "a fraction");
  app.add_flag("--verbose", verbose, "more logs");
  app.add_option("--peer", peers, "peers");

  const std::optional<int> exit =
      gift::daemon::ParseDaemonFlags(app, static_cast<int>(argv.size()), argv.data(), "gift-fuzz");
  if (exit.has_value() && *exit != gift::daemon::kExitOk && *exit != gift::daemon::kExitUsage) {
    gift::fuzz::Fail("ParseDaemonFlags returned an exit code outside the contract");
  }
  if (!exit.has_value()) {
    (void)gift::daemon::ParseDurationFlag(lease_ttl);
    (void)gift::daemon::CheckHostPort(listen);
    for (const std::string& p : peers) (void)gift::daemon::CheckHostPort(p);
  }
  return 0;
}
