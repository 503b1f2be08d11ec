// Measures the server's reduction of one chunk the way AggregatorShard runs
// it, for benchmarks (gift-bench cluster's "reducer" line): P encoded
// pushes are placed into the reducer's receive slots (the copy into the
// slot stands in for the transport's delivery and is not timed), accepted
// (checksum and parse, in place) and reduced into the chunk's reusable send
// buffer (ReduceEncodedBlocked, in rank order, on the calling thread).
//
// Thread safety: reentrant (each call builds its own reducer).
#ifndef GIFT_SERVER_AGGREGATOR_REDUCTION_TIMING_H_
#define GIFT_SERVER_AGGREGATOR_REDUCTION_TIMING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec_spec.h"

namespace gift::server {

struct ChunkReductionTiming {
  double all_pushes_s = 0;  // median per chunk: accepting the P pushes + reducing
  double last_push_s = 0;   // median: accepting the completing push + reducing
  double reduce_s = 0;      // median: the reduction and re-encoding alone
  uint64_t result_bytes = 0;
};

// `payloads`: one serialized push per rank (rank order), each rows x cols.
// Runs one warm-up chunk, then `reps` timed ones (steps 1, 2, ...).
// InvalidArgument on bad payloads or reps < 1; the reducer's errors.
absl::StatusOr<ChunkReductionTiming> TimeChunkReduction(
    absl::Span<const std::vector<uint8_t>> payloads, uint64_t rows, uint64_t cols,
    const codec::CodecSpec& pull_spec, int reps);

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_REDUCTION_TIMING_H_
