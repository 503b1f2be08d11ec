// Per-operation costs for the step model (bench/step_model.h), read from the
// JSON that `gift-bench codec`, `gift-bench transform` and `gift-bench
// cluster` write (--json). What is taken from each:
//
//   codec      cpu.ops[]: input_gbps (FP32 GB/s) of encode, decode and
//              decode-acc per spec, at the largest thread count measured
//   transform  shapes[].cpu[]: forward_gflops and inverse_gflops at the
//              largest thread count, the median over shapes; config.rank
//   cluster    reducer: gbps_fp32_out x ranks = the server's decode-accumulate
//              (+ its one encode) rate per push, for its push codec
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
  std::optional<double> transform_forward_flops, transform_inverse_flops;
  std::optional<int> transform_rank;
  std::vector<std::string> sources;  // one line per document read, for the report

  // Adds what `doc` (read from `path`) holds; a later document's value for
  // the same op and spec replaces an earlier one.
  absl::Status Add(const nlohmann::json& doc, const std::string& path);

  // The rate of an op for a spec name (any spelling ParseCodecSpec accepts).
  std::optional<double> Encode(const std::string& spec) const;
  std::optional<double> Decode(const std::string& spec) const;
  std::optional<double> DecodeAccumulate(const std::string& spec) const;
};

// Reads and adds every file (JSON) to one MeasuredCosts.
absl::Status LoadCosts(const std::vector<std::string>& paths, MeasuredCosts& out);

}  // namespace gift::bench

#endif  // GIFT_BENCH_MODEL_COSTS_H_
