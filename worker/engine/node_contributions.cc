#include "worker/engine/node_contributions.h"

#include <utility>

namespace gift::worker {

bool NodeContributions::Hold(const dataplane::ChunkHeader& header, transport::Message& message,
                             std::optional<uint64_t> open_epoch) {
  const uint64_t size = message.bytes().size();
  if ((open_epoch.has_value() && header.epoch < *open_epoch) || bytes_ + size > max_bytes_) {
    return false;
  }
  bytes_ += size;
  std::vector<uint8_t> payload =
      message.placed.data() == nullptr
          ? std::move(message.payload)
          : std::vector<uint8_t>(message.placed.begin(), message.placed.end());
  held_.push_back({.header = header,
                   .header_bytes = {message.header.begin(), message.header.end()},
                   .payload = std::move(payload)});
  ++arrivals_;
  return true;
}

void NodeContributions::DropEpochsBefore(uint64_t epoch) {
  std::erase_if(held_, [&](const NodeContribution& c) {
    if (c.header.epoch >= epoch) return false;
    bytes_ -= c.payload.size();
    return true;
  });
}

std::vector<NodeContribution> NodeContributions::Take(uint64_t epoch, uint64_t step) {
  std::vector<NodeContribution> taken;
  seen_ = arrivals_;
  std::erase_if(held_, [&](NodeContribution& c) {
    if (c.header.epoch != epoch || c.header.step != step) return false;
    bytes_ -= c.payload.size();
    taken.push_back(std::move(c));
    return true;
  });
  return taken;
}

}  // namespace gift::worker
