#include "bench/bench_util.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/codec/codec.h"

namespace gift::bench {

const std::vector<std::string>& DefaultCodecSpecs() {
  static const auto* specs = new std::vector<std::string>{
      "e4m3/tensor", "e4m3/block128", "e5m2/tensor", "e4m3/mx32", "nvfp4", "bf16", "e4m3/tensor/sr",
  };
  return *specs;
}

CLI::Validator CodecSpecValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::StatusOr<codec::CodecSpec> spec = codec::ParseCodecSpec(text);
        return spec.ok() ? std::string() : std::string(spec.status().message());
      },
      "SPEC", "codec spec");
}

namespace {

CLI::Validator NumberAtLeast(double lo, bool strict, const char* name) {
  return CLI::Validator(
      [lo, strict](std::string& text) -> std::string {
        double v = 0;
        if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || (strict ? v <= lo : v < lo)) {
          return absl::StrCat("must be a finite number ", strict ? ">" : ">=", " ", lo, ", got '",
                              text, "'");
        }
        return std::string();
      },
      name, name);
}

}  // namespace

CLI::Validator PositiveNumber() { return NumberAtLeast(0, true, "POSITIVE"); }
CLI::Validator NonNegativeNumber() { return NumberAtLeast(0, false, "NONNEGATIVE"); }

absl::StatusOr<MatrixShape> ParseMatrixShape(const std::string& text, int64_t max_side,
                                             int64_t max_elements) {
  const std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar("xX"));
  MatrixShape s;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &s.rows) ||
      !absl::SimpleAtoi(parts[1], &s.cols) || s.rows < 1 || s.cols < 1 || s.rows > max_side ||
      s.cols > max_side) {
    return absl::InvalidArgumentError(absl::StrCat("bad shape '", text, "': want ROWSxCOLS, each in [1, ",
                                                   max_side, "], e.g. 1024x1024"));
  }
  if (s.rows > max_elements / s.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape '", text, "' is too large (at most ", max_elements, " elements)"));
  }
  return s;
}

absl::StatusOr<std::vector<codec::CodecSpec>> ParseSpecs(const std::vector<std::string>& names) {
  if (names.empty()) return absl::InvalidArgumentError("the list of codec specs is empty");
  std::vector<codec::CodecSpec> specs;
  for (const std::string& name : names) {
    GIFT_ASSIGN_OR_RETURN(codec::CodecSpec spec, codec::ParseCodecSpec(name));
    specs.push_back(spec);
  }
  return specs;
}

std::optional<ProcessUsage> ReadProcessUsage(const std::string& pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces; fields restart after its ')'.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0, minflt = 0;
  // After ')': state is field 3; minflt is field 10, utime and stime 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 10) minflt = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return ProcessUsage{
      .cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK)),
      .minor_faults = static_cast<double>(minflt)};
}

int HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

double Median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

absl::StatusOr<Timing> TimeRuns(int reps, const std::function<absl::Status()>& fn) {
  if (reps < 1) return absl::InvalidArgumentError("reps must be at least 1");
  GIFT_RETURN_IF_ERROR(fn());  // warm-up: page faults, caches, pool threads
  Timing t;
  t.seconds.reserve(reps);
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    GIFT_RETURN_IF_ERROR(fn());
    const auto stop = std::chrono::steady_clock::now();
    t.seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  t.median_s = Median(t.seconds);
  return t;
}

std::vector<float> MakeGradientLikeInput(uint64_t rows, uint64_t cols, uint64_t seed,
                                         ThreadPool* pool) {
  std::vector<float> x(rows * cols);
  constexpr uint64_t kRowsPerChunk = 16;
  const uint64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  ParallelFor(pool, chunks, [&](size_t c) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + c);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> log_scale(-10.0f, -3.0f);
    const uint64_t r_end = std::min(rows, (c + 1) * kRowsPerChunk);
    for (uint64_t r = c * kRowsPerChunk; r < r_end; ++r) {
      const float row_scale = std::exp2(log_scale(rng));
      float* row = x.data() + r * cols;
      for (uint64_t j = 0; j < cols; ++j) row[j] = normal(rng) * row_scale;
    }
  });
  return x;
}

absl::StatusOr<std::vector<codec::EncodedTensor>> MakeReduceInputs(const codec::CodecSpec& spec,
                                                                   const std::vector<float>& x,
                                                                   uint64_t rows, uint64_t cols,
                                                                   int count, ThreadPool* pool) {
  std::vector<codec::EncodedTensor> inputs;
  std::vector<float> rotated(x.size());
  for (int i = 0; i < count; ++i) {
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t, codec::EncodedTensor::Create(spec, rows, cols));
    const size_t shift = x.empty() ? 0 : (x.size() / count) * i % x.size();
    std::rotate_copy(x.begin(), x.begin() + shift, x.end(), rotated.begin());
    GIFT_RETURN_IF_ERROR(
        codec::Encode(rotated.data(), t.mutable_view(),
                      codec::RngKey{.tensor = 7, .step = 0, .rank = static_cast<uint32_t>(i)},
                      codec::CodecOptions{.pool = pool}));
    inputs.push_back(std::move(t));
  }
  return inputs;
}

absl::StatusOr<OutputSinks> OutputSinks::Open(const std::string& json_path) {
  OutputSinks sinks;
  sinks.json_path_ = json_path;
  sinks.table_ = json_path == "-" ? &std::cerr : &std::cout;
  if (!json_path.empty() && json_path != "-") {
    sinks.file_ = std::make_unique<std::ofstream>(json_path, std::ios::out | std::ios::trunc);
    if (!*sinks.file_) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open --json file '", json_path, "' for writing"));
    }
  }
  return sinks;
}

absl::Status OutputSinks::WriteJson(const nlohmann::json& doc) {
  if (json_path_.empty()) return absl::OkStatus();
  std::ostream& out = file_ ? static_cast<std::ostream&>(*file_) : std::cout;
  out << doc.dump(2) << '\n';
  out.flush();
  if (!out) {
    return absl::DataLossError(absl::StrCat("writing JSON to '", json_path_, "' failed"));
  }
  return absl::OkStatus();
}

void WriteLine(std::ostream& os, const std::string& line) {
  size_t end = line.size();
  while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\n')) --end;
  os.write(line.data(), static_cast<std::streamsize>(end));
  os << '\n';
}

double GigabytesPerSecond(double bytes, double seconds) {
  return seconds > 0 ? bytes / seconds * 1e-9 : 0.0;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", std::strerror(e)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

std::string OutputTail(const std::string& text, size_t n) {
  std::string t = text.size() > n ? "..." + text.substr(text.size() - n) : text;
  std::replace(t.begin(), t.end(), '\n', ' ');
  return t;
}

std::string SelfPath() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : self.string();
}

}  // namespace gift::bench
