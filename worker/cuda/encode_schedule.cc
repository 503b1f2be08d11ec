#include "worker/cuda/encode_schedule.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace gift::worker {

bool SameEncode(const ChunkEncode& a, const ChunkEncode& b) {
  return a.offset == b.offset && a.view.spec == b.view.spec && a.view.rows == b.view.rows &&
         a.view.cols == b.view.cols && a.view.codes == b.view.codes &&
         a.view.scales == b.view.scales && a.key.tensor == b.key.tensor &&
         a.key.step == b.key.step && a.key.rank == b.key.rank && a.code_bytes == b.code_bytes &&
         a.scale_bytes == b.scale_bytes;
}

namespace {

// Whether no two of the calls' code and scale ranges share a byte.
bool Disjoint(const std::vector<ChunkEncode>& calls) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end)
  for (const ChunkEncode& c : calls) {
    const auto add = [&ranges](const uint8_t* p, uint64_t bytes) {
      if (bytes > 0)
        ranges.emplace_back(reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes);
    };
    add(c.view.codes, c.code_bytes);
    add(c.view.scales, c.scale_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return false;
  }
  return true;
}

}  // namespace

void EncodeSchedule::Forget() {
  previous_.clear();
  current_.clear();
  predicted_.clear();
  diverged_ = false;
}

void EncodeSchedule::StartStep() {
  if (!current_.empty()) previous_ = std::move(current_);
  current_.clear();
  if (!Disjoint(previous_)) previous_.clear();
  predicted_.assign(previous_.size(), std::nullopt);
  diverged_ = false;
}

EncodeSchedule::Plan EncodeSchedule::Next(const ChunkEncode& call) {
  Plan plan;
  plan.slot = current_.size();
  current_.push_back(call);
  const size_t k = plan.slot;
  if (k < predicted_.size() && predicted_[k].has_value()) {
    plan.encode = !SameEncode(*predicted_[k], call);
    if (plan.encode) diverged_ = true;
  }
  if (diverged_) {
    predicted_.clear();  // encodes ahead past k are overwritten when their calls come
    return plan;
  }
  for (size_t j = k + 1; j <= k + ahead_ && j < previous_.size(); ++j) {
    if (predicted_[j].has_value()) continue;  // enqueued at an earlier call
    ChunkEncode guess = previous_[j];
    guess.key.step = call.key.step;  // the other fields repeat step after step
    predicted_[j] = guess;
    plan.ahead.push_back({j, guess});
  }
  return plan;
}

void EncodeSchedule::NotEnqueued(size_t slot) {
  for (size_t j = slot; j < predicted_.size(); ++j) predicted_[j].reset();
}

}  // namespace gift::worker
