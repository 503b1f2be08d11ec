// The cell formats and layouts every giftctl command prints with: tables
// whose columns line up, messages as proto3 JSON, and "-" for what is not set.
//
// Plain values and stateless functions; thread-compatible.
#ifndef GIFT_TOOLS_GIFTCTL_OUTPUT_H_
#define GIFT_TOOLS_GIFTCTL_OUTPUT_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gift::giftctl {

// Columns padded to their widest cell, two spaces apart; the header first.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void Add(std::vector<std::string> row);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// A message in the proto3 JSON mapping, field names as in the .proto, every
// primitive field present; null when it cannot be converted.
nlohmann::json ProtoJson(const google::protobuf::Message& message);

// `value`, or `fallback` when it is empty.
std::string Or(const std::string& value, const std::string& fallback = "-");

// 0 shows as "-" (the coordinator's default applies).
template <typename T>
std::string NumOrDash(T value) {
  return value == T{} ? "-" : absl::StrCat(value);
}

// A duration in milliseconds as absl writes durations ("1.5s", "-200ms").
std::string Millis(int64_t ms);

}  // namespace gift::giftctl

#endif  // GIFT_TOOLS_GIFTCTL_OUTPUT_H_
