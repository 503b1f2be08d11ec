#include "tests/testing/log_events.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gift::test {

absl::StatusOr<std::string> WaitForEvent(tools::Subprocess& process, const std::string& event,
                                         const std::vector<std::string>& contains,
                                         absl::Duration timeout) {
  const std::string tag = absl::StrCat("\"event\":\"", event, "\"");
  return process.WaitForLine(
      [&](const std::string& line) {
        if (!absl::StrContains(line, tag)) return false;
        for (const std::string& c : contains) {
          if (!absl::StrContains(line, c)) return false;
        }
        return true;
      },
      timeout);
}

std::string EventField(tools::Subprocess& process, const std::string& event,
                       const std::string& field) {
  auto line = WaitForEvent(process, event);
  if (!line.ok()) return "";
  const nlohmann::json j = nlohmann::json::parse(*line, nullptr, false);
  if (!j.is_object()) return "";
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace gift::test
