#include "common/base/logging.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace gift::logging {
namespace {

absl::Mutex sink_mu(absl::kConstInit);
std::string* daemon_name = nullptr;  // guarded by sink_mu; never freed once set

std::string JsonString(absl::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool IsFixedKey(absl::string_view key) {
  return key == "time" || key == "level" || key == "daemon" || key == "event";
}

}  // namespace

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "unknown";
}

LogField::LogField(absl::string_view key, absl::string_view value)
    : key_(key), json_(JsonString(value)) {}

LogField::LogField(absl::string_view key, bool value)
    : key_(key), json_(value ? "true" : "false") {}

LogField::LogField(absl::string_view key, double value)
    : key_(key), json_(std::isfinite(value) ? nlohmann::json(value).dump() : "null") {}

void SetDaemonName(absl::string_view name) {
  absl::MutexLock lock(&sink_mu);
  if (daemon_name == nullptr) daemon_name = new std::string();
  daemon_name->assign(name.data(), name.size());
}

std::string FormatTimestamp(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

std::string FormatLogLine(absl::Time time, Level level, absl::string_view daemon,
                          absl::string_view event, std::initializer_list<LogField> fields) {
  std::string line =
      absl::StrCat("{\"time\":\"", FormatTimestamp(time), "\",\"level\":\"", LevelName(level),
                   "\",\"daemon\":", JsonString(daemon), ",\"event\":", JsonString(event));
  for (const LogField& field : fields) {
    absl::StrAppend(
        &line, ",",
        JsonString(IsFixedKey(field.key()) ? absl::StrCat("_", field.key()) : field.key()), ":",
        field.json_value());
  }
  line.push_back('}');
  return line;
}

void Log(Level level, absl::string_view event, std::initializer_list<LogField> fields) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&sink_mu);
  std::string line =
      FormatLogLine(now, level, daemon_name == nullptr ? "" : *daemon_name, event, fields);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace gift::logging
