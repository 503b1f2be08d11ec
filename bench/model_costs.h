// Per-operation costs for the step model (bench/step_model.h), read from the
// JSON that `gift-bench codec`, `gift-bench transform` and `gift-bench
// cluster` write (--json). What is taken from each:
//
//   codec      cpu.ops[]: input_gbps (FP32 GB/s) of encode, decode and
//              decode-acc per spec, at a thread count (0: the largest measured)
//   transform  shapes[].cpu[]: forward_gflops and inverse_gflops at that
//              thread count (0: the largest), the median over shapes; config.rank
//   cluster    reducer: gbps_fp32_out x ranks = the server's rate per push,
//              its one encode of the pull included, for its push codec
//
// Documents of other commands, or without those fields, are refused
// (InvalidArgument, naming the file). Thread-compatible value type.
#ifndef GIFT_BENCH_MODEL_COSTS_H_
#define GIFT_BENCH_MODEL_COSTS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct MeasuredCosts {
  // By canonical codec spec name (codec::ToString), FP32 bytes per second.
  std::map<std::string, double> encode_bps, decode_bps, decode_acc_bps;
  // The cluster reducer's rate per push with the server's encode included.
  std::map<std::string, double> reducer_bps;
  std::optional<double> transform_forward_flops, transform_inverse_flops;
  std::optional<int> transform_rank;
  std::vector<std::string> sources;  // one line per document read, for the report

  // Adds what `doc` (read from `path`) holds; a later document's value for
  // the same op and spec replaces an earlier one. `threads`: which codec and
  // transform rows (0: the largest thread count in the document).
  absl::Status Add(const nlohmann::json& doc, const std::string& path, int threads = 0);

  // The rate of an op for a spec name (any spelling ParseCodecSpec accepts).
  std::optional<double> Encode(const std::string& spec) const;
  std::optional<double> Decode(const std::string& spec) const;
  std::optional<double> DecodeAccumulate(const std::string& spec) const;
  std::optional<double> Reducer(const std::string& push_spec) const;
};

// Reads and adds every file (JSON) to one MeasuredCosts.
absl::Status LoadCosts(const std::vector<std::string>& paths, int threads, MeasuredCosts& out);

}  // namespace gift::bench

#endif  // GIFT_BENCH_MODEL_COSTS_H_
