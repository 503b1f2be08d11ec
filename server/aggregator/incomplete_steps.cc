#include "server/aggregator/incomplete_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gift::server {

void IncompleteSteps::Add(uint64_t step, absl::Span<const uint8_t> covered) {
  Tally& t = steps_[step];
  ++t.chunks;
  if (t.missing.size() < covered.size()) t.missing.resize(covered.size(), 0);
  for (size_t r = 0; r < covered.size(); ++r) t.missing[r] |= covered[r] == 0 ? 1 : 0;
}

std::vector<IncompleteStep> IncompleteSteps::steps() const {
  std::vector<IncompleteStep> out;
  out.reserve(steps_.size());
  for (const auto& [step, tally] : steps_) {
    IncompleteStep s{.step = step, .chunks = tally.chunks};
    for (size_t r = 0; r < tally.missing.size(); ++r) {
      if (tally.missing[r] != 0) s.missing_ranks.push_back(static_cast<uint32_t>(r));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string DescribeRanks(absl::Span<const uint32_t> ranks) {
  constexpr size_t kMaxNamed = 16;
  const size_t named = std::min(ranks.size(), kMaxNamed);
  std::string text = absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                  absl::StrJoin(ranks.subspan(0, named), ", "));
  if (ranks.size() > named) absl::StrAppend(&text, " and ", ranks.size() - named, " more");
  return text;
}

std::string DescribeChunks(uint64_t chunks) {
  return absl::StrCat(chunks, chunks == 1 ? " chunk" : " chunks");
}

std::string IncompleteSteps::Describe(size_t max_steps) const {
  std::vector<std::string> parts;
  for (const IncompleteStep& s : steps()) {
    if (parts.size() == max_steps) {
      parts.push_back(absl::StrCat(steps_.size() - max_steps, " more steps"));
      break;
    }
    parts.push_back(absl::StrCat("step ", s.step, " (", DescribeChunks(s.chunks),
                                 "): ", DescribeRanks(s.missing_ranks), " missing"));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace gift::server
