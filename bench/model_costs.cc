#include "bench/model_costs.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "common/codec/codec_spec.h"

namespace gift::bench {
namespace {

using nlohmann::json;

std::string Canonical(const std::string& spec) {
  absl::StatusOr<codec::CodecSpec> s = codec::ParseCodecSpec(spec);
  return s.ok() ? codec::ToString(*s) : spec;
}

std::optional<double> Find(const std::map<std::string, double>& m, const std::string& spec) {
  auto it = m.find(Canonical(spec));
  if (it == m.end()) return std::nullopt;
  return it->second;
}

absl::Status AddCodec(const json& doc, int threads, MeasuredCosts& out, std::string& line) {
  const json& ops = doc.at("cpu").at("ops");
  int max_threads = threads;
  if (threads <= 0) {
    for (const json& op : ops) max_threads = std::max(max_threads, op.at("threads").get<int>());
  }
  int n = 0;
  for (const json& op : ops) {
    if (op.at("threads").get<int>() != max_threads) continue;
    const std::string spec = Canonical(op.at("spec").get<std::string>());
    const std::string name = op.at("op").get<std::string>();
    const double bps = op.at("input_gbps").get<double>() * 1e9;
    if (name == "encode") out.encode_bps[spec] = bps;
    if (name == "decode") out.decode_bps[spec] = bps;
    if (name == "decode-acc") out.decode_acc_bps[spec] = bps;
    ++n;
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat("no ops at ", max_threads, " threads"));
  line = absl::StrFormat("codec: %d op rates at %d threads", n, max_threads);
  return absl::OkStatus();
}

absl::Status AddTransform(const json& doc, int threads, MeasuredCosts& out, std::string& line) {
  std::vector<double> fwd, inv;
  int threads_used = 0;
  for (const json& shape : doc.at("shapes")) {
    const json* best = nullptr;
    for (const json& row : shape.at("cpu")) {
      const int t = row.at("threads").get<int>();
      if (threads > 0 ? t == threads
                      : best == nullptr || t > best->at("threads").get<int>()) {
        best = &row;
      }
    }
    if (best == nullptr) continue;
    threads_used = best->at("threads").get<int>();
    fwd.push_back(best->at("forward_gflops").get<double>() * 1e9);
    inv.push_back(best->at("inverse_gflops").get<double>() * 1e9);
  }
  if (fwd.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no CPU rows at ", threads, " threads"));
  }
  out.transform_forward_flops = Median(fwd);
  out.transform_inverse_flops = Median(inv);
  out.transform_rank = doc.at("config").at("rank").get<int>();
  line = absl::StrFormat(
      "transform: rank %d, forward %.1f GFLOP/s, inverse %.1f GFLOP/s (median of %d shapes, %d "
      "threads)",
      *out.transform_rank, *out.transform_forward_flops * 1e-9, *out.transform_inverse_flops * 1e-9,
      static_cast<int>(fwd.size()), threads_used);
  return absl::OkStatus();
}

absl::Status AddCluster(const json& doc, MeasuredCosts& out, std::string& line) {
  const json& r = doc.at("reducer");
  if (!r.value("ran", false)) return absl::InvalidArgumentError("its reducer did not run");
  const double per_push = r.at("gbps_fp32_out").get<double>() * 1e9 * r.at("ranks").get<int>();
  const std::string spec = Canonical(r.at("push_codec").get<std::string>());
  out.reducer_bps[spec] = per_push;
  line = absl::StrFormat("cluster reducer: %s decode-accumulate %.2f GB/s per push (%d ranks)",
                         spec, per_push * 1e-9, r.at("ranks").get<int>());
  return absl::OkStatus();
}

}  // namespace

absl::Status MeasuredCosts::Add(const json& doc, const std::string& path, int threads) {
  std::string line;
  absl::Status s;
  try {
    const std::string command = doc.value("command", "");
    if (command == "codec") {
      s = AddCodec(doc, threads, *this, line);
    } else if (command == "transform") {
      s = AddTransform(doc, threads, *this, line);
    } else if (doc.contains("reducer")) {
      s = AddCluster(doc, *this, line);
    } else {
      s = absl::InvalidArgumentError("not the JSON of gift-bench codec, transform or cluster");
    }
  } catch (const json::exception& e) {
    s = absl::InvalidArgumentError(absl::StrCat("missing or mistyped field: ", e.what()));
  }
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  sources.push_back(absl::StrCat(path, ": ", line));
  return absl::OkStatus();
}

std::optional<double> MeasuredCosts::Encode(const std::string& spec) const {
  return Find(encode_bps, spec);
}
std::optional<double> MeasuredCosts::Decode(const std::string& spec) const {
  return Find(decode_bps, spec);
}
std::optional<double> MeasuredCosts::DecodeAccumulate(const std::string& spec) const {
  return Find(decode_acc_bps, spec);
}

std::optional<double> MeasuredCosts::Reducer(const std::string& push_spec) const {
  return Find(reducer_bps, push_spec);
}

absl::Status LoadCosts(const std::vector<std::string>& paths, int threads, MeasuredCosts& out) {
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
    if (absl::Status s = out.Add(doc, path, threads); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gift::bench
