// The pushes an aggregator shard's ChunkReducer (chunk_reducer.h) holds
// because they arrived before the shard knew their epoch (a worker saw the
// coordinator's new epoch first) or their chunk (a tensor registered moments
// ago), with a bound on the bytes held. SetEpoch and AddChunks take those
// that can be decided and replay them.
//
// Ownership: owns the held headers and payloads.
//
// Thread safety: thread-compatible (ChunkReducer calls it under its mutex).
#ifndef GIFT_SERVER_AGGREGATOR_DEFERRED_PUSHES_H_
#define GIFT_SERVER_AGGREGATOR_DEFERRED_PUSHES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/dataplane/chunk_header.h"

namespace gift::server {

class DeferredPushes {
 public:
  struct Push {
    dataplane::ChunkHeader header;
    std::vector<uint8_t> payload;
  };

  // At most `max_bytes` payload bytes held at once.
  explicit DeferredPushes(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Holds one push; ResourceExhausted naming `header` when its payload would
  // take the bytes held past max_bytes (and nothing is held).
  absl::Status Hold(const dataplane::ChunkHeader& header, std::vector<uint8_t> payload);

  // Takes what can be decided now that `epoch` is current: each push of an
  // earlier epoch is dropped, with a FailedPrecondition naming it appended
  // to `refused`; each push for which `must_defer` is false is returned, in
  // arrival order; the others stay held.
  std::vector<Push> TakeDecidable(uint64_t epoch,
                                  absl::FunctionRef<bool(const dataplane::ChunkHeader&)> must_defer,
                                  std::vector<absl::Status>& refused);

  size_t size() const { return held_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  const uint64_t max_bytes_;
  std::vector<Push> held_;
  uint64_t bytes_ = 0;
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_DEFERRED_PUSHES_H_
