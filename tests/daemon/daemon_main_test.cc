// DaemonMain: the signal mask it sets first, the flag parse, the usage and
// startup failures with their exit codes and messages, the shutdown
// announcement, and the default member name.
#include "common/daemon/daemon_main.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/daemon/daemon_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gift::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

bool Blocked(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

// Parses `args` (after the program name) into an app with one --listen flag.
std::optional<int> Parse(DaemonMain& daemon, std::vector<std::string> args, std::string* listen) {
  CLI::App app("gift-test: a test daemon.");
  app.add_option("--listen", *listen, "HOST:PORT");
  args.insert(args.begin(), "gift-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return daemon.ParseFlags(app, static_cast<int>(argv.size()), argv.data());
}

TEST(DaemonMainTest, BlocksTheShutdownSignalsForEveryThreadStartedAfterIt) {
  DaemonMain daemon("gift-test");
  EXPECT_TRUE(Blocked(SIGTERM));
  EXPECT_TRUE(Blocked(SIGINT));
  bool thread_blocks_term = false;
  std::thread([&] { thread_blocks_term = Blocked(SIGTERM) && Blocked(SIGINT); }).join();
  EXPECT_TRUE(thread_blocks_term);
  // A signal sent to the process waits for the waiter instead of killing it.
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ(daemon.signals().WaitFor(absl::Seconds(10)), SIGTERM);
}

TEST(DaemonMainTest, ParseFlagsGoesOnOrReturnsTheExitCode) {
  DaemonMain daemon("gift-test");
  EXPECT_EQ(daemon.name(), "gift-test");
  std::string listen;
  EXPECT_EQ(Parse(daemon, {"--listen", "127.0.0.1:1"}, &listen), std::nullopt);
  EXPECT_EQ(listen, "127.0.0.1:1");
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(Parse(daemon, {"--help"}, &listen), kExitOk);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("--listen"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Parse(daemon, {"--no-such-flag"}, &listen), kExitUsage);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), StartsWith("gift-test: "));
}

TEST(DaemonMainTest, AddressChecksReportUsageErrorsNamingTheFlag) {
  DaemonMain daemon("gift-test");
  EXPECT_EQ(daemon.CheckAddressFlag("--listen", "127.0.0.1:0"), std::nullopt);
  EXPECT_EQ(daemon.CheckAddressFlag("--metrics-listen", "", /*empty_disables=*/true),
            std::nullopt);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(daemon.CheckAddressFlag("--listen", ""), kExitUsage);
  EXPECT_EQ(daemon.CheckAddressFlag("--metrics-listen", "no-port"), kExitUsage);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("gift-test: --listen: "));
  EXPECT_THAT(err, HasSubstr("gift-test: --metrics-listen: "));
  EXPECT_THAT(err, HasSubstr("no-port"));
  EXPECT_THAT(err, HasSubstr("Run with --help for usage."));
}

TEST(DaemonMainTest, FailLogsStartupFailedAndExitsOne) {
  DaemonMain daemon("gift-test");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(daemon.Fail("cannot listen on 127.0.0.1:7"), kExitFailure);
  EXPECT_EQ(daemon.UsageError("give --socket"), kExitUsage);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr(R"("event":"startup_failed")"));
  EXPECT_THAT(err, HasSubstr(R"("error":"cannot listen on 127.0.0.1:7")"));
  EXPECT_THAT(err, HasSubstr("gift-test: cannot listen on 127.0.0.1:7\n"));
  EXPECT_THAT(err, HasSubstr("gift-test: give --socket\nRun with --help for usage.\n"));
}

TEST(DaemonMainTest, AnnounceShutdownLogsTheSignalOrTheDrainRequest) {
  DaemonMain daemon("gift-test");
  ::testing::internal::CaptureStderr();
  daemon.AnnounceShutdown(SIGTERM, "draining");
  daemon.AnnounceShutdown(0, "draining");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr(R"("event":"shutting_down","signal":"SIGTERM")"));
  EXPECT_THAT(err, HasSubstr(R"("event":"shutting_down","reason":"drain requested")"));
}

TEST(DaemonMainTest, DefaultMemberNameIsHostKindAndPid) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(DefaultMemberName("server"), absl::StrCat(host, "/server-", getpid()));
  EXPECT_NE(DefaultMemberName("server"), DefaultMemberName("worker"));
}

}  // namespace
}  // namespace gift::daemon
