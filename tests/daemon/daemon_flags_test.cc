// ParseDaemonFlags: the config file, its precedence below the command line,
// and the exit codes of the daemon contract.
#include "common/daemon/daemon_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace gift::daemon {
namespace {

struct Flags {
  std::string listen = "0.0.0.0:7070";
  int threads = 0;
  std::string ttl = "10s";
};

struct Result {
  std::optional<int> exit;
  Flags flags;
  std::string err;
  std::string out;
};

Result Parse(std::vector<std::string> args) {
  CLI::App app("test daemon");
  Result r;
  app.add_option("--listen", r.flags.listen, "address")->capture_default_str();
  app.add_option("--threads", r.flags.threads, "threads")->capture_default_str();
  app.add_option("--lease-ttl", r.flags.ttl, "ttl")->capture_default_str();
  args.insert(args.begin(), "gift-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  r.exit = ParseDaemonFlags(app, static_cast<int>(argv.size()), argv.data(), "gift-test");
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

// The directory of this process's config files, removed (with them) at exit.
const gift::TempDir& ConfigDir() {
  static const gift::TempDir dir = test::NewTempDir("gift-daemon-flags");
  return dir;
}

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = ConfigDir().File(name + ".toml");
  std::ofstream(path) << text;
  return path;
}

TEST(DaemonFlagsTest, NoFlagsKeepsDefaults) {
  Result r = Parse({});
  EXPECT_FALSE(r.exit.has_value());
  EXPECT_EQ(r.flags.listen, "0.0.0.0:7070");
}

TEST(DaemonFlagsTest, ConfigFileSetsFlags) {
  const std::string path = WriteConfig(
      "sets", "# comment\nlisten = \"127.0.0.1:9000\"\nthreads = 3\nlease-ttl = \"2s\"\n");
  Result r = Parse({"--config", path});
  ASSERT_FALSE(r.exit.has_value()) << r.err;
  EXPECT_EQ(r.flags.listen, "127.0.0.1:9000");
  EXPECT_EQ(r.flags.threads, 3);
  EXPECT_EQ(r.flags.ttl, "2s");
}

TEST(DaemonFlagsTest, CommandLineOverridesConfigFile) {
  const std::string path = WriteConfig("override", "listen = \"127.0.0.1:9000\"\nthreads = 3\n");
  Result r = Parse({"--listen", "127.0.0.1:1", "--config", path});
  ASSERT_FALSE(r.exit.has_value()) << r.err;
  EXPECT_EQ(r.flags.listen, "127.0.0.1:1");
  EXPECT_EQ(r.flags.threads, 3);
}

TEST(DaemonFlagsTest, UnknownKeyIsAUsageErrorNamingTheKey) {
  const std::string path = WriteConfig("unknown", "listen = \"127.0.0.1:9000\"\nlisten-typo = 1\n");
  Result r = Parse({"--config", path});
  ASSERT_TRUE(r.exit.has_value());
  EXPECT_EQ(*r.exit, kExitUsage);
  EXPECT_NE(r.err.find("gift-test: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("listen-typo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Run with --help for usage."), std::string::npos) << r.err;
}

TEST(DaemonFlagsTest, MissingConfigFileIsAUsageError) {
  Result r = Parse({"--config", "/nonexistent/gift.toml"});
  ASSERT_TRUE(r.exit.has_value());
  EXPECT_EQ(*r.exit, kExitUsage);
  EXPECT_NE(r.err.find("/nonexistent/gift.toml"), std::string::npos) << r.err;
}

TEST(DaemonFlagsTest, BadValueInConfigIsAUsageError) {
  const std::string path = WriteConfig("badvalue", "threads = \"many\"\n");
  Result r = Parse({"--config", path});
  ASSERT_TRUE(r.exit.has_value());
  EXPECT_EQ(*r.exit, kExitUsage);
  EXPECT_NE(r.err.find("threads"), std::string::npos) << r.err;
}

TEST(DaemonFlagsTest, UnknownFlagIsAUsageError) {
  Result r = Parse({"--bogus"});
  ASSERT_TRUE(r.exit.has_value());
  EXPECT_EQ(*r.exit, kExitUsage);
  EXPECT_EQ(r.err.rfind("gift-test: ", 0), 0u) << r.err;
}

TEST(DaemonFlagsTest, HelpExitsZeroAndListsConfig) {
  Result r = Parse({"--help"});
  ASSERT_TRUE(r.exit.has_value());
  EXPECT_EQ(*r.exit, 0);
  EXPECT_NE((r.out + r.err).find("--config"), std::string::npos);
}

TEST(DaemonFlagsTest, ParsesDurations) {
  EXPECT_EQ(*ParseDurationFlag("10s"), absl::Seconds(10));
  EXPECT_EQ(*ParseDurationFlag("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDurationFlag("2.5"), absl::Milliseconds(2500));
  EXPECT_EQ(*ParseDurationFlag("1m30s"), absl::Seconds(90));
  EXPECT_FALSE(ParseDurationFlag("soon").ok());
  EXPECT_FALSE(ParseDurationFlag("").ok());
  EXPECT_FALSE(ParseDurationFlag("inf").ok());
}

TEST(DaemonFlagsTest, RejectsAbsurdDurationsQuotingTheText) {
  for (const char* text : {"1e300", "100000h", "-1e20", "200000h"}) {
    absl::StatusOr<absl::Duration> d = ParseDurationFlag(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().message(),
              absl::StrCat("'", text, "' is too long a duration (at most 99999h)"));
  }
  EXPECT_EQ(ParseDurationFlag("2x").status().message(),
            "'2x' is not a duration (e.g. 2s, 500ms, 1m30s)");
  EXPECT_EQ(*ParseDurationFlag(" 2s "), absl::Seconds(2));
  EXPECT_EQ(*ParseDurationFlag("1h"), absl::Hours(1));
}

// AddDurationOption: the one duration flag of every daemon, giftctl and
// gift-cluster.
struct DurationResult {
  std::optional<int> exit;
  absl::Duration value;
  std::string err;
};

DurationResult ParseDuration(std::vector<std::string> args, DurationRange range) {
  CLI::App app("test daemon");
  DurationResult r{.value = absl::Seconds(10)};
  AddDurationOption(app, "--drain-timeout", &r.value, "how long", range);
  args.insert(args.begin(), "gift-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  r.exit = ParseDaemonFlags(app, static_cast<int>(argv.size()), argv.data(), "gift-test");
  testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

TEST(DaemonFlagsTest, DurationOptionTakesTheOneSyntax) {
  const DurationRange positive = DurationRange::kPositive;
  EXPECT_EQ(ParseDuration({}, positive).value, absl::Seconds(10));
  EXPECT_EQ(ParseDuration({"--drain-timeout", "2s"}, positive).value, absl::Seconds(2));
  EXPECT_EQ(ParseDuration({"--drain-timeout", "500ms"}, positive).value, absl::Milliseconds(500));
  EXPECT_EQ(ParseDuration({"--drain-timeout=1m30s"}, positive).value, absl::Seconds(90));
  EXPECT_EQ(ParseDuration({"--drain-timeout", "2.5"}, positive).value, absl::Milliseconds(2500));
  const std::string path = WriteConfig("duration", "drain-timeout = \"1m30s\"\n");
  EXPECT_EQ(ParseDuration({"--config", path}, positive).value, absl::Seconds(90));
  EXPECT_EQ(ParseDuration({"--drain-timeout", "0s"}, DurationRange::kNonNegative).value,
            absl::ZeroDuration());
}

TEST(DaemonFlagsTest, BadDurationIsAUsageErrorQuotingTheText) {
  DurationResult r = ParseDuration({"--drain-timeout", "2x"}, DurationRange::kPositive);
  EXPECT_EQ(r.exit, kExitUsage);
  EXPECT_EQ(r.err,
            "gift-test: --drain-timeout: '2x' is not a duration (e.g. 2s, 500ms, 1m30s)\n"
            "Run with --help for usage.\n");
  r = ParseDuration({"--drain-timeout", "0s"}, DurationRange::kPositive);
  EXPECT_EQ(r.exit, kExitUsage);
  EXPECT_NE(r.err.find("--drain-timeout: must be positive, got '0s'"), std::string::npos) << r.err;
  r = ParseDuration({"--drain-timeout", "-1s"}, DurationRange::kNonNegative);
  EXPECT_EQ(r.exit, kExitUsage);
  EXPECT_NE(r.err.find("must not be negative, got '-1s'"), std::string::npos) << r.err;
  r = ParseDuration({"--drain-timeout", "1e300"}, DurationRange::kPositive);
  EXPECT_EQ(r.exit, kExitUsage);
  EXPECT_NE(r.err.find("'1e300' is too long a duration"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 120u) << r.err;
}

TEST(DaemonFlagsTest, TlsFlagsFromCommandLineAndConfig) {
  CLI::App app("test daemon");
  TlsFlags tls;
  AddTlsFlags(app, &tls);
  const std::string path =
      WriteConfig("tls",
                  "tls-cert = \"/etc/gift/tls/tls.crt\"\ntls-key = \"/etc/gift/tls/tls.key\"\n"
                  "tls-ca = \"/etc/gift/tls/ca.crt\"\n");
  std::vector<std::string> args = {"gift-test", "--config", path, "--insecure"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  EXPECT_FALSE(ParseDaemonFlags(app, static_cast<int>(argv.size()), argv.data(), "gift-test"));
  EXPECT_EQ(tls.files.cert, "/etc/gift/tls/tls.crt");
  EXPECT_EQ(tls.files.key, "/etc/gift/tls/tls.key");
  EXPECT_EQ(tls.files.ca, "/etc/gift/tls/ca.crt");
  EXPECT_TRUE(tls.insecure);
}

TEST(DaemonFlagsTest, ChecksHostPort) {
  EXPECT_TRUE(CheckHostPort("0.0.0.0:9470").ok());
  EXPECT_TRUE(CheckHostPort("[::1]:0").ok());
  EXPECT_FALSE(CheckHostPort("9470").ok());
  EXPECT_FALSE(CheckHostPort(":9470").ok());
  EXPECT_FALSE(CheckHostPort("host:").ok());
  EXPECT_FALSE(CheckHostPort("host:70000").ok());
}

}  // namespace
}  // namespace gift::daemon
