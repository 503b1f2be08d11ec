// Structured logs: one JSON object per line on stderr,
//
//   {"time":"2026-11-29T23:35:01.123Z","level":"info","daemon":"gift-coordinator",
//    "event":"listening","address":"127.0.0.1:7070"}
//
// with the fields in the order given. Events are short snake_case names that
// tools can match on; the fields carry the details.
//
//   gift::logging::SetDaemonName("gift-coordinator");  // once, at startup
//   gift::logging::Log(Level::kInfo, "member_joined", {{"member_id", id}, {"rank", rank}});
//
// Process-wide state: the daemon name (set once by main at startup) and the
// sink, stderr, written under one mutex so that lines from concurrent threads
// never interleave. Nothing else is configurable.
//
// Thread safety: every function may be called from any thread.
#ifndef GIFT_COMMON_BASE_LOGGING_H_
#define GIFT_COMMON_BASE_LOGGING_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gift::logging {

enum class Level { kDebug, kInfo, kWarning, kError };

absl::string_view LevelName(Level level);

// One key and its value, already encoded as a JSON value.
class LogField {
 public:
  LogField(absl::string_view key, absl::string_view value);
  LogField(absl::string_view key, const char* value)
      : LogField(key, absl::string_view(value == nullptr ? "" : value)) {}
  LogField(absl::string_view key, const std::string& value)
      : LogField(key, absl::string_view(value)) {}
  LogField(absl::string_view key, bool value);
  LogField(absl::string_view key, double value);
  template <typename Int,
            typename = std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>>>
  LogField(absl::string_view key, Int value)
      : key_(key),
        json_(std::is_signed_v<Int> ? std::to_string(static_cast<int64_t>(value))
                                    : std::to_string(static_cast<uint64_t>(value))) {}

  const std::string& key() const { return key_; }
  const std::string& json_value() const { return json_; }

 private:
  std::string key_;
  std::string json_;
};

// Sets the "daemon" field of every later line. Meant to be called once, at startup.
void SetDaemonName(absl::string_view name);

// Writes one line to stderr and flushes it.
void Log(Level level, absl::string_view event, std::initializer_list<LogField> fields = {});

// The line Log writes (without the newline), exposed for tests. Invalid UTF-8
// in strings is replaced by U+FFFD; a field named like a fixed key ("time",
// "level", "daemon", "event") is written with a leading underscore.
std::string FormatLogLine(absl::Time time, Level level, absl::string_view daemon,
                          absl::string_view event, std::initializer_list<LogField> fields);

// RFC 3339, UTC, milliseconds: "2026-11-29T23:35:01.123Z".
std::string FormatTimestamp(absl::Time time);

}  // namespace gift::logging

#endif  // GIFT_COMMON_BASE_LOGGING_H_
