#include "tools/giftctl/output.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <utility>

#include "absl/time/time.h"

namespace gift::giftctl {

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void Table::Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    out << line << '\n';
  }
}

nlohmann::json ProtoJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) return nlohmann::json();
  return nlohmann::json::parse(text);
}

std::string Or(const std::string& value, const std::string& fallback) {
  return value.empty() ? fallback : value;
}

std::string Millis(int64_t ms) { return absl::FormatDuration(absl::Milliseconds(ms)); }

}  // namespace gift::giftctl
