// The server-side baseline of `gift-bench cluster`: one chunk's reduction on
// the aggregator's path (server::TimeChunkReduction: P placed pushes parsed in
// place, summed, re-encoded with the pull codec) against memcpy of the same
// FP32 bytes, in this process.
//
// Thread safety: a plain function.
#ifndef GIFT_BENCH_REDUCER_BASELINE_H_
#define GIFT_BENCH_REDUCER_BASELINE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"

namespace gift::bench {

struct ReducerOptions {
  uint64_t chunk_bytes = 0;  // FP32 bytes of the chunk (a multiple of 4)
  uint32_t workers = 1;      // pushes per reduction
  int reps = 1;              // timed reductions (memcpy: 5x as many)
};

struct ReducerResult {
  bool ran = false;
  std::string error;
  uint64_t rows = 0, cols = 0;
  uint64_t payload_bytes = 0;
  double all_pushes_s = 0;  // median: P AddPush calls of one chunk
  double last_push_s = 0;   // median: the completing push (reduce + re-encode)
  double memcpy_s = 0;
};

absl::StatusOr<ReducerResult> RunReducer(const ReducerOptions& options,
                                         const codec::CodecSpec& push,
                                         const codec::CodecSpec& pull);

}  // namespace gift::bench

#endif  // GIFT_BENCH_REDUCER_BASELINE_H_
