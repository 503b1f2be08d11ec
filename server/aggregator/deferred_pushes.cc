#include "server/aggregator/deferred_pushes.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::server {

absl::Status DeferredPushes::Hold(const dataplane::ChunkHeader& header,
                                  std::vector<uint8_t> payload) {
  if (bytes_ + payload.size() > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(dataplane::ToString(header), ": ", bytes_,
                     " bytes of pushes already wait for an epoch or chunk this shard does "
                     "not know yet"));
  }
  bytes_ += payload.size();
  held_.push_back({.header = header, .payload = std::move(payload)});
  return absl::OkStatus();
}

std::vector<DeferredPushes::Push> DeferredPushes::TakeDecidable(
    uint64_t epoch, absl::FunctionRef<bool(const dataplane::ChunkHeader&)> must_defer,
    std::vector<absl::Status>& refused) {
  std::vector<Push> ready;
  std::vector<Push> keep;
  for (Push& d : held_) {
    if (d.header.epoch < epoch) {
      bytes_ -= d.payload.size();
      refused.push_back(absl::FailedPreconditionError(
          absl::StrCat(dataplane::ToString(d.header), ": deferred push of epoch ", d.header.epoch,
                       ", which ended before this shard served it (epoch ", epoch, ")")));
    } else if (!must_defer(d.header)) {
      bytes_ -= d.payload.size();
      ready.push_back(std::move(d));
    } else {
      keep.push_back(std::move(d));
    }
  }
  held_ = std::move(keep);
  return ready;
}

}  // namespace gift::server
