// ParseDaemonFlags: the config file, its precedence below the command line,
// and the exit codes of the daemon contract.
#include "common/daemon/daemon_flags.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

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

std::string WriteConfig(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, "-", getpid(), ".toml");
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
