#include "server/aggregator/reduction_timing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/aggregator/chunk_reducer.h"

namespace gift::server {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

absl::StatusOr<ChunkReductionTiming> TimeChunkReduction(
    absl::Span<const std::vector<uint8_t>> payloads, uint64_t rows, uint64_t cols,
    const codec::CodecSpec& pull_spec, int reps) {
  if (payloads.empty() || reps < 1) {
    return absl::InvalidArgumentError("needs at least one payload and one repetition");
  }
  const auto world = static_cast<uint32_t>(payloads.size());
  auto reducer = ChunkReducer::Create({.pull_spec = pull_spec});
  if (!reducer.ok()) return reducer.status();
  auto update = (*reducer)->SetEpoch(1, world, {{{1, 0}, {rows, cols}}});
  if (!update.ok()) return update.status();
  std::vector<double> all, last, reduce;
  ChunkReductionTiming timing;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    double accept_total = 0, accept_last = 0;
    std::optional<ReductionJob> job;
    for (uint32_t rank = 0; rank < world; ++rank) {
      const dataplane::ChunkHeader header{.kind = dataplane::ChunkKind::kPush,
                                          .epoch = 1,
                                          .step = static_cast<uint64_t>(rep) + 1,
                                          .tensor_id = 1,
                                          .chunk_index = 0,
                                          .rank = rank,
                                          .world_size = world};
      absl::Span<uint8_t> slot = (*reducer)->PlacePush(header, payloads[rank].size());
      if (slot.size() != payloads[rank].size()) {
        return absl::InternalError(absl::StrCat("rank ", rank, "'s push was not placed"));
      }
      std::memcpy(slot.data(), payloads[rank].data(), slot.size());  // the transport's part
      const Clock::time_point start = Clock::now();
      auto accepted = (*reducer)->AcceptPlaced(header, slot);
      const double s = Since(start);
      if (!accepted.ok()) return accepted.status();
      if (accepted->has_value() != (rank + 1 == world)) {
        return absl::InternalError("the reducer completed the chunk at the wrong push");
      }
      accept_total += s;
      accept_last = s;
      if (accepted->has_value()) job = **std::move(accepted);
    }
    const Clock::time_point start = Clock::now();
    auto result = (*reducer)->Reduce(*std::move(job));
    const double r = Since(start);
    if (!result.ok()) return result.status();
    timing.result_bytes = result->payload().size();
    if (rep > 0) {
      all.push_back(accept_total + r);
      last.push_back(accept_last + r);
      reduce.push_back(r);
    }
  }
  timing.all_pushes_s = Median(all);
  timing.last_push_s = Median(last);
  timing.reduce_s = Median(reduce);
  return timing;
}

}  // namespace gift::server
