#include "common/base/logging.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace gift::logging {
namespace {

TEST(LoggingTest, FormatsOneJsonObjectWithFixedKeysFirst) {
  const absl::Time t = absl::FromUnixMillis(1795300501123);  // 2026-11-22T...
  const std::string line =
      FormatLogLine(t, Level::kWarning, "gift-coordinator", "listening",
                    {{"address", "127.0.0.1:7070"}, {"port", 7070}, {"ok", true}, {"ratio", 0.5}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], FormatTimestamp(t));
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["daemon"], "gift-coordinator");
  EXPECT_EQ(j["event"], "listening");
  EXPECT_EQ(j["address"], "127.0.0.1:7070");
  EXPECT_EQ(j["port"], 7070);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["ratio"], 0.5);
  EXPECT_EQ(line.rfind("{\"time\":", 0), 0u);
}

TEST(LoggingTest, TimeIsRfc3339UtcWithMilliseconds) {
  EXPECT_EQ(FormatTimestamp(absl::FromUnixMillis(0)), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatTimestamp(absl::FromUnixMillis(1234567890123)), "2009-02-13T23:31:30.123Z");
}

TEST(LoggingTest, EscapesStringsAndRenamesFixedKeys) {
  const std::string line = FormatLogLine(absl::UnixEpoch(), Level::kInfo, "d", "e",
                                         {{"msg", "quote \" newline \n bad \xff"},
                                          {"event", "shadow"},
                                          {"neg", int64_t{-3}},
                                          {"big", uint64_t{18446744073709551615u}},
                                          {"nan", 0.0 / 0.0}});
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "e");
  EXPECT_EQ(j["_event"], "shadow");
  EXPECT_EQ(j["msg"], "quote \" newline \n bad \xef\xbf\xbd");
  EXPECT_EQ(j["neg"], -3);
  EXPECT_EQ(j["big"].get<uint64_t>(), 18446744073709551615u);
  EXPECT_TRUE(j["nan"].is_null());
}

TEST(LoggingTest, ConcurrentLinesNeverInterleave) {
  SetDaemonName("test-daemon");
  testing::internal::CaptureStderr();
  constexpr int kThreads = 4, kLines = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) {
        Log(Level::kInfo, "tick", {{"thread", t}, {"i", i}, {"pad", std::string(100, 'x')}});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string out = testing::internal::GetCapturedStderr();
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["daemon"], "test-daemon");
    EXPECT_EQ(j["event"], "tick");
  }
}

}  // namespace
}  // namespace gift::logging
