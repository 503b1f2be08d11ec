#include "bench/reducer_baseline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "bench/bench_util.h"
#include "common/base/split_mix64.h"
#include "common/base/status_macros.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/payload.h"
#include "server/aggregator/reduction_timing.h"

namespace gift::bench {

absl::StatusOr<ReducerResult> RunReducer(const ReducerOptions& o, const codec::CodecSpec& push,
                                         const codec::CodecSpec& pull) {
  ReducerResult r;
  const uint64_t elements = o.chunk_bytes / sizeof(float);
  r.cols = elements % 1024 == 0 ? 1024 : elements;
  r.rows = elements / r.cols;
  const uint32_t P = o.workers;
  const uint64_t dims[] = {r.rows, r.cols};
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t rank = 0; rank < P; ++rank) {
    std::vector<float> g(elements);
    uint64_t s = 0xC0FFEEull + rank;
    for (uint64_t i = 0; i < elements; ++i) {
      g[i] = static_cast<float>((SplitMix64Uniform(s) - 0.5) *
                                std::pow(10.0, -3.0 * (i % r.cols) / r.cols));
    }
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                          codec::EncodedTensor::Create(push, r.rows, r.cols));
    GIFT_RETURN_IF_ERROR(codec::Encode(g.data(), t.mutable_view(), {.tensor = 1, .rank = rank}));
    GIFT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, codec::SerializePayload(t.view(), dims));
    payloads.push_back(std::move(bytes));
  }
  r.payload_bytes = payloads[0].size();
  // The shard's path: placed pushes, parsed in place, reduced into a reusable
  // send buffer (server/aggregator/reduction_timing.h).
  GIFT_ASSIGN_OR_RETURN(
      server::ChunkReductionTiming timing,
      server::TimeChunkReduction(payloads, r.rows, r.cols, pull, std::max(1, o.reps)));
  r.all_pushes_s = timing.all_pushes_s;
  r.last_push_s = timing.last_push_s;
  const int reps = std::max(1, o.reps);
  std::vector<float> src(elements, 1.0f), dst(elements, 0.0f);
  std::vector<double> copies;
  for (int rep = 0; rep <= 5 * reps; ++rep) {
    src[rep % elements] = static_cast<float>(rep);
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), o.chunk_bytes);
    const double s = SecondsSince(start);
    if (dst[rep % elements] != static_cast<float>(rep)) return absl::InternalError("memcpy check");
    if (rep > 0) copies.push_back(s);
  }
  r.memcpy_s = Median(copies);
  r.ran = true;
  return r;
}

}  // namespace gift::bench
