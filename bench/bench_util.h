// Helpers shared by the gift-bench subcommands: spec lists, timing, test
// data, and where the human-readable and JSON output go.
//
// Nothing here holds global state; all functions are thread-compatible.
#ifndef GIFT_BENCH_BENCH_UTIL_H_
#define GIFT_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

// The specs `gift-bench codec` measures when --specs is not given.
const std::vector<std::string>& DefaultCodecSpecs();

// A CLI11 validator that accepts one codec spec (codec::ParseCodecSpec).
// Use with ->delimiter(',') so that every element of a list is checked.
CLI::Validator CodecSpecValidator();

// Validators for finite numbers > 0 and >= 0, with plain error messages.
CLI::Validator PositiveNumber();
CLI::Validator NonNegativeNumber();

// A matrix shape from the command line: "ROWSxCOLS" (x or X), e.g. 4096x11008.
struct MatrixShape {
  int64_t rows = 0;
  int64_t cols = 0;
};
// InvalidArgument naming `text` unless both sides are in [1, max_side] and
// rows * cols <= max_elements.
absl::StatusOr<MatrixShape> ParseMatrixShape(const std::string& text, int64_t max_side,
                                             int64_t max_elements = INT64_MAX);

// Parses spec names that CodecSpecValidator accepted (or fails the same way).
absl::StatusOr<std::vector<codec::CodecSpec>> ParseSpecs(const std::vector<std::string>& names);

// CPU time (utime + stime) and minor page faults of a process so far, from
// /proc/PID/stat; `pid` is a number or "self". nullopt when it cannot be read
// (the process is gone).
struct ProcessUsage {
  double cpu_s = 0;
  double minor_faults = 0;
};
std::optional<ProcessUsage> ReadProcessUsage(const std::string& pid);

// std::thread::hardware_concurrency(), at least 1.
int HardwareThreads();

// Median of the samples (mean of the two middle ones for an even count).
// 0 for no samples.
double Median(std::vector<double> samples);

// Nearest-rank percentile (q in [0, 1]) of a non-empty sample.
double Percentile(std::vector<double> samples, double q);

// Seconds of std::chrono::steady_clock since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// A loopback TCP port that was free a moment ago (bound to port 0 and
// closed): for a child that must be told its port before it starts.
absl::StatusOr<int> FreePort();

// The last `n` characters of a child's output on one line ("..." in front
// when cut, newlines as spaces): for error messages.
std::string OutputTail(const std::string& text, size_t n = 600);

// This program's path (/proc/self/exe), "" when unknown.
std::string SelfPath();

// Wall-clock timing of `fn`: one untimed warm-up call, then `reps` timed
// calls. Stops at the first error `fn` returns.
struct Timing {
  std::vector<double> seconds;  // one per rep, in run order
  double median_s = 0;
};
absl::StatusOr<Timing> TimeRuns(int reps, const std::function<absl::Status()>& fn);

// Gradient-like FP32 test data, rows x cols, row-major: Gaussian values whose
// magnitude varies from row to row over about two decades. Deterministic for a
// seed, whatever the pool (rows are generated in fixed chunks).
std::vector<float> MakeGradientLikeInput(uint64_t rows, uint64_t cols, uint64_t seed,
                                         ThreadPool* pool);

// `count` encoded tensors of `spec` to feed a reduction: input i is `x`
// rotated by i * n / count elements and encoded with RngKey rank i, so the
// inputs differ while keeping the same statistics.
absl::StatusOr<std::vector<codec::EncodedTensor>> MakeReduceInputs(const codec::CodecSpec& spec,
                                                                   const std::vector<float>& x,
                                                                   uint64_t rows, uint64_t cols,
                                                                   int count, ThreadPool* pool);

// Where a subcommand writes. `--json -` sends JSON to stdout, and the human
// table then goes to stderr so that stdout stays parseable.
class OutputSinks {
 public:
  // Opens the JSON file now (so that a bad path fails before a long run).
  // An empty path means no JSON.
  static absl::StatusOr<OutputSinks> Open(const std::string& json_path);

  std::ostream& table() const { return *table_; }
  // Writes the document (pretty-printed) to the JSON destination, if any.
  absl::Status WriteJson(const nlohmann::json& doc);

  OutputSinks(OutputSinks&&) = default;
  OutputSinks& operator=(OutputSinks&&) = default;

 private:
  OutputSinks() = default;

  std::string json_path_;
  std::ostream* table_ = nullptr;
  std::unique_ptr<std::ofstream> file_;
};

// Writes `line` without its trailing blanks, then a newline.
void WriteLine(std::ostream& os, const std::string& line);

// "12.3 GB/s"-style helpers for tables: bytes / seconds in GB/s (1e9 bytes).
double GigabytesPerSecond(double bytes, double seconds);

}  // namespace gift::bench

#endif  // GIFT_BENCH_BENCH_UTIL_H_
