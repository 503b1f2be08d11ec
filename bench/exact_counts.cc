#include "bench/exact_counts.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gift::bench {

float ExactValue(int w) { return static_cast<float>(uint64_t{1} << (2 * w)); }

absl::StatusOr<std::vector<std::vector<int>>> Counts(const client::SharedTensor& t, uint32_t world,
                                                     int workers) {
  std::vector<std::vector<int>> counts(t.size(), std::vector<int>(workers + 1, 0));
  for (size_t i = 0; i < t.size(); ++i) {
    const double total = std::round(static_cast<double>(t.data()[i]) * world);
    auto n = static_cast<uint64_t>(total);
    for (int w = 0; w <= workers; ++w, n >>= 2) counts[i][w] = static_cast<int>(n & 3);
    if (n != 0) return absl::DataLossError(absl::StrCat("element ", i, " sums to ", total));
  }
  return counts;
}

CountCheck CheckCounts(const std::vector<std::vector<int>>& counts,
                       const std::vector<int>& expected, int workers, const std::vector<int>& may) {
  std::vector<bool> lost(workers, false), doubled(workers, false);
  size_t spoofed = 0;
  const auto in = [](const std::vector<int>& set, int v) {
    return std::find(set.begin(), set.end(), v) != set.end();
  };
  for (const std::vector<int>& c : counts) {
    for (int v = 0; v < workers; ++v) {
      const bool want = in(expected, v);
      lost[v] = lost[v] || (want && c[v] == 0);
      doubled[v] = doubled[v] || c[v] > (want || in(may, v) ? 1 : 0);
    }
    spoofed += c[workers] > 0 ? 1 : 0;
  }
  CountCheck check;
  check.lost = static_cast<int>(std::count(lost.begin(), lost.end(), true));
  check.doubled = static_cast<int>(std::count(doubled.begin(), doubled.end(), true));
  check.spoofed = counts.empty() ? 0.0 : static_cast<double>(spoofed) / counts.size();
  return check;
}

}  // namespace gift::bench
