#include "bench/model_bench.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/model_costs.h"
#include "bench/step_model.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/payload.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

using nlohmann::json;

// FP32 bytes per transformed element one transform pass moves through memory
// (reads of G by the two skinny products, the write of the result): the
// HBM-bound estimate's assumption.
constexpr double kTransformBytesPerElement = 16;

absl::StatusOr<std::vector<ModelTensor2D>> LoadTensors(const ModelBenchOptions& o) {
  if (o.tensors_json.empty()) {
    if (o.layers <= 0 && o.params <= 0) {
      return absl::InvalidArgumentError("give --tensors-json, --layers or --params");
    }
    return LlamaTensors(o.d_model, o.layers, o.params, o.ffn_mult, o.vocab);
  }
  std::ifstream in(o.tensors_json);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", o.tensors_json));
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.tensors_json, ": not a JSON array (gift-bench cluster --list-tensors)"));
  }
  std::vector<ModelTensor2D> out;
  for (const json& t : doc) {
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array() ||
        t["shape"].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(o.tensors_json, ": a tensor without shape"));
    }
    std::vector<uint64_t> dims;
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned()) return absl::InvalidArgumentError("non-integer dimension");
      dims.push_back(d.get<uint64_t>());
    }
    uint64_t rows = 1;
    for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
    out.push_back({t.value("name", ""), rows, dims.back()});
  }
  return out;
}

// Payload bytes per element of a codec over the model's tensors (scales and
// headers included).
absl::StatusOr<double> BytesPerElement(const std::string& spec_name,
                                       const std::vector<ModelTensor2D>& tensors) {
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec spec, codec::ParseCodecSpec(spec_name));
  double bytes = 0, elements = 0;
  for (const ModelTensor2D& t : tensors) {
    std::vector<uint64_t> shape = {t.rows, t.cols};
    if (t.rows == 1) shape = {t.cols};
    GIFT_ASSIGN_OR_RETURN(const uint64_t b, codec::PayloadSizeFor(spec, shape));
    bytes += static_cast<double>(b);
    elements += static_cast<double>(t.rows * t.cols);
  }
  return bytes / elements;
}

std::vector<ModelTensor2D> TransformedSubset(const std::vector<ModelTensor2D>& tensors,
                                             const std::vector<std::string>& only) {
  if (only.empty()) return tensors;
  std::vector<ModelTensor2D> out;
  for (const ModelTensor2D& t : tensors) {
    for (const std::string& s : only) {
      if (absl::StrContains(t.name, s)) {
        out.push_back(t);
        break;
      }
    }
  }
  return out;
}

// One op rate and where it came from.
struct Rate {
  double bps = 0;
  std::string source = "free";
};
Rate Pick(double flag_gbps, std::optional<double> measured, double estimate) {
  if (flag_gbps >= 0) return {flag_gbps * 1e9, "flag"};
  if (measured) return {*measured, "measured"};
  if (estimate > 0) return {estimate, "HBM-bound assumption"};
  return {};
}

struct MethodSetup {
  MethodConfig config;
  OpRates ops;
  std::map<std::string, Rate> rates;  // for the report
};

absl::StatusOr<MethodSetup> Setup(const std::string& name, const std::string& hierarchy,
                                  const ModelBenchOptions& o, const MeasuredCosts& costs,
                                  const std::vector<ModelTensor2D>& tensors,
                                  const ModelTotals& transformed) {
  MethodSetup m;
  MethodConfig& c = m.config;
  c.label = name;
  c.push_pull_overlap = o.push_pull_overlap;
  c.server_bps = (o.server_gbit > 0 ? o.server_gbit : o.link_gbit) * 1e9 / 8;
  const double hbm = o.hbm_gbyte * 1e9 * o.hbm_efficiency;
  auto cast_estimate = [&](double b) { return hbm > 0 ? 4 * hbm / (4 + b) : 0.0; };
  std::string push = o.push_codec, pull = o.pull_codec;
  if (absl::EndsWith(name, "-ring")) {
    c.method = Method::kRing;
    c.bytes_per_element = name == "fp32-ring" ? 4 : name == "bf16-ring" ? 2 : 1;
    if (name != "fp32-ring" && name != "bf16-ring" && name != "fp8-ring") {
      return absl::InvalidArgumentError(absl::StrCat("unknown method ", name));
    }
    c.ring_cast = c.bytes_per_element < 4;
    if (c.ring_cast) {
      const std::string cast_spec = c.bytes_per_element == 2 ? "bf16" : "e4m3/tensor";
      const double estimate = cast_estimate(c.bytes_per_element);
      m.rates["cast"] = Pick(o.encode_gbps, costs.Encode(cast_spec), estimate);
      m.rates["uncast"] = Pick(o.decode_gbps, costs.Decode(cast_spec), estimate);
    }
    m.rates["ring reduce"] = Pick(o.ring_reduce_gbps, costs.DecodeAccumulate("fp32"), 0);
    m.ops.encode_bps = m.rates["cast"].bps;
    m.ops.decode_bps = m.rates["uncast"].bps;
    m.ops.ring_reduce_bps = m.rates["ring reduce"].bps;
  } else {
    c.method = Method::kService;
    if (name == "fp32-service") {
      push = pull = "fp32";
    } else if (name == "gift") {
      c.transform = true;
    } else if (name != "direct") {
      return absl::InvalidArgumentError(absl::StrCat("unknown method ", name));
    }
    c.label = absl::StrCat(name, hierarchy == "node" ? " node" : "");
    c.hierarchy = hierarchy == "node" ? Hierarchy::kNode : Hierarchy::kNone;
    c.encode = true;
    GIFT_ASSIGN_OR_RETURN(c.push_bytes_per_element, BytesPerElement(push, tensors));
    GIFT_ASSIGN_OR_RETURN(c.pull_bytes_per_element, BytesPerElement(pull, tensors));
    m.rates["encode"] = Pick(o.encode_gbps, costs.Encode(push), cast_estimate(c.push_bytes_per_element));
    m.rates["decode"] = Pick(o.decode_gbps, costs.Decode(pull), cast_estimate(c.pull_bytes_per_element));
    if (std::optional<double> r = costs.Reducer(push); r && o.reduce_gbps < 0) {
      m.rates["server reduce"] = {*r, "measured (cluster reducer, encode included)"};
      m.rates["server encode"] = {0, "in the reducer's rate"};
    } else {
      m.rates["server reduce"] = Pick(o.reduce_gbps, costs.DecodeAccumulate(push), 0);
      m.rates["server encode"] = Pick(o.server_encode_gbps, costs.Encode(pull), 0);
    }
    m.ops.encode_bps = m.rates["encode"].bps;
    m.ops.decode_bps = m.rates["decode"].bps;
    m.ops.reduce_bps = m.rates["server reduce"].bps;
    m.ops.server_encode_bps = m.rates["server encode"].bps;
    if (c.transform) {
      // Forward and inverse at one rate: the flag's, the measured forward's
      // (as slow as the slower of forward and inverse), or HBM-bound.
      std::optional<double> measured;
      if (costs.transform_forward_flops && costs.transform_inverse_flops) {
        measured = std::min(*costs.transform_forward_flops, *costs.transform_inverse_flops);
      }
      double estimate = 0;
      if (hbm > 0 && transformed.transform_flops > 0) {
        estimate = transformed.transform_flops /
                   (static_cast<double>(transformed.transformed_elements) *
                    kTransformBytesPerElement / hbm);
      }
      Rate r = Pick(o.transform_gflops, measured, estimate);
      if (r.source == "flag" && estimate > 0) {
        // A FLOP rate and HBM: the slower bound wins.
        r.bps = std::min(r.bps, estimate);
        r.source = "flag, HBM-bound";
      }
      m.rates["transform (FLOP/s)"] = r;
      m.ops.transform_flops_per_s = r.bps;
    }
  }
  m.ops.worker_contention = o.worker_contention;
  m.ops.server_contention = o.server_contention;
  return m;
}

json PredictionJson(const StepPrediction& p) {
  return {{"method", p.label},
          {"gpu_tx_bytes", p.gpu_tx_bytes},
          {"gpu_rx_bytes", p.gpu_rx_bytes},
          {"server_tx_bytes", p.server_tx_bytes},
          {"server_rx_bytes", p.server_rx_bytes},
          {"nvlink_bytes", p.nvlink_bytes},
          {"worker_encode_s", p.worker_encode_s},
          {"intra_node_s", p.intra_node_s},
          {"push_s", p.push_s},
          {"server_s", p.server_s},
          {"pull_s", p.pull_s},
          {"worker_decode_s", p.worker_decode_s},
          {"network_s", p.network_s},
          {"comm_s", p.comm_s},
          {"compute_s", p.compute_s},
          {"exposed_s", p.exposed_s},
          {"step_s", p.step_s},
          {"bottleneck", p.bottleneck}};
}

absl::Status Run(const ModelBenchOptions& o) {
  GIFT_ASSIGN_OR_RETURN(OutputSinks out, OutputSinks::Open(o.json_path));
  std::ostream& os = out.table();
  GIFT_ASSIGN_OR_RETURN(const std::vector<ModelTensor2D> tensors, LoadTensors(o));
  MeasuredCosts costs;
  GIFT_RETURN_IF_ERROR(LoadCosts(o.costs, o.costs_threads, costs));

  const ModelTotals plain = Totals(tensors, false, o.rank);
  const ModelTotals sub = Totals(TransformedSubset(tensors, o.transform_only), true, o.rank);
  const ModelTotals with_transform{.elements = plain.elements,
                                   .transformed_elements = sub.transformed_elements,
                                   .transform_flops = sub.transform_flops};
  const double E = static_cast<double>(plain.elements);

  Compute compute{.forward_s = o.forward_ms * 1e-3,
                  .backward_s = o.backward_ms * 1e-3,
                  .backward_overlap = o.backward_overlap,
                  .bucket_bytes = o.bucket_mib * 1024 * 1024,
                  .ops_on_compute = o.ops_on_compute,
                  .ops_overlap = o.ops_overlap};
  std::string compute_basis = "given";
  if (o.forward_ms == 0 && o.backward_ms == 0 && o.tokens_per_gpu > 0) {
    const double total = 6 * E * o.tokens_per_gpu / (o.mfu * o.peak_tflops * 1e12);
    compute.forward_s = total / 3;
    compute.backward_s = 2 * total / 3;
    compute_basis = absl::StrFormat("6 N tokens: N %.3g, %.0f tokens per GPU, MFU %.2f of %.0f TFLOP/s",
                                    E, o.tokens_per_gpu, o.mfu, o.peak_tflops);
  }

  os << absl::StrFormat(
      "gift-bench model: predicted, not measured. %zu tensors, %.4g elements (%.1f MB FP32); "
      "transformed %.4g elements at rank %d (%.3g GFLOP per direction)\n",
      tensors.size(), E, 4 * E * 1e-6, static_cast<double>(with_transform.transformed_elements),
      o.rank, with_transform.transform_flops * 1e-9);
  os << absl::StrFormat(
      "link %.4g Gbit/s per GPU (efficiency %.3f, latency %.3g us), server NIC %.4g Gbit/s, "
      "NVLink %.4g GB/s, %d GPUs per node; codecs push %s, pull %s; push/pull overlap %.2f\n",
      o.link_gbit, o.link_efficiency, o.link_latency_us,
      o.server_gbit > 0 ? o.server_gbit : o.link_gbit, o.nvlink_gbyte, o.gpus_per_node,
      o.push_codec, o.pull_codec, o.push_pull_overlap);
  os << absl::StrFormat(
      "compute (%s): forward %.2f ms, backward %.2f ms, backward overlap %.2f, last bucket %.0f "
      "MiB; worker ops %s\n",
      compute_basis, compute.forward_s * 1e3, compute.backward_s * 1e3, compute.backward_overlap,
      o.bucket_mib,
      o.ops_on_compute ? "on the compute device (add to compute)"
                       : absl::StrFormat("in the communication path (ops overlap %.2f)",
                                         o.ops_overlap));
  for (const std::string& s : costs.sources) os << "costs from " << s << "\n";
  if (std::find(o.hierarchy.begin(), o.hierarchy.end(), "node") != o.hierarchy.end()) {
    os << "note: hierarchy node (intra-node reduce over NVLink, one push per node) is modelled "
          "only; the service has no node-local aggregation yet\n";
  }

  std::vector<MethodSetup> setups;
  for (const std::string& name : o.methods) {
    const bool ring = absl::EndsWith(name, "-ring");
    for (const std::string& h : o.hierarchy) {
      if (h != "none" && h != "node") return absl::InvalidArgumentError("hierarchy: none|node");
      if (ring && h != o.hierarchy.front()) continue;
      GIFT_ASSIGN_OR_RETURN(MethodSetup m, Setup(name, h, o, costs, tensors, with_transform));
      setups.push_back(std::move(m));
    }
  }
  os << "op rates (GB/s of FP32, transform GFLOP/s):";
  for (const MethodSetup& m : setups) {
    os << "\n  " << m.config.label << ":";
    for (const auto& [op, r] : m.rates) {
      os << absl::StrFormat(" %s %.4g (%s);", op, r.bps * 1e-9, r.source);
    }
    if (m.config.method == Method::kService) {
      os << absl::StrFormat(" bytes/element push %.4f pull %.4f", m.config.push_bytes_per_element,
                            m.config.pull_bytes_per_element);
    }
  }
  os << "\n";

  Cluster cluster{.gpus_per_node = o.gpus_per_node,
                  .link_bps = o.link_gbit * 1e9 / 8,
                  .link_latency_s = o.link_latency_us * 1e-6,
                  .link_efficiency = o.link_efficiency,
                  .nvlink_bps = o.nvlink_gbyte * 1e9,
                  .nvlink_latency_s = o.nvlink_latency_us * 1e-6};
  json configs = json::array();
  for (int gpus : o.gpus) {
    cluster.gpus = gpus;
    const int max_servers = o.max_servers > 0 ? o.max_servers : std::max(gpus, 1);
    json sizing = json::array();
    std::map<std::string, int> sized;  // method label -> nic_bound servers
    for (const MethodSetup& m : setups) {
      if (m.config.method != Method::kService) continue;
      GIFT_ASSIGN_OR_RETURN(const ServerSizing s,
                            SizeServers(with_transform, cluster, m.ops, compute, m.config,
                                        o.target_tolerance, max_servers));
      sized[m.config.label] = s.nic_bound > 0 ? s.nic_bound : max_servers;
      sizing.push_back({{"method", m.config.label},
                        {"servers_nic_bound", s.nic_bound},
                        {"servers_for_target", s.for_target},
                        {"target_tolerance", o.target_tolerance},
                        {"step_at_nic_bound_s", s.step_at_nic_bound_s},
                        {"step_at_target_s", s.step_at_target_s}});
    }
    for (int servers : o.servers) {
      std::vector<StepPrediction> preds;
      std::map<std::string, double> ring_step;
      for (const MethodSetup& m : setups) {
        MethodConfig c = m.config;
        if (c.method == Method::kService) c.servers = servers > 0 ? servers : sized[c.label];
        GIFT_ASSIGN_OR_RETURN(StepPrediction p,
                              PredictStep(c.transform ? with_transform : plain, cluster, m.ops,
                                          compute, c));
        if (c.method == Method::kService) p.label = absl::StrCat(p.label, " S=", c.servers);
        if (c.method == Method::kRing) ring_step[c.label] = p.step_s;
        preds.push_back(std::move(p));
      }
      os << absl::StrFormat("\n%d GPUs, servers %s\n", gpus,
                            servers > 0 ? absl::StrCat(servers) : "sized (NIC-bound)");
      WriteLine(os, absl::StrFormat(
                        "%-22s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %9s %7s %7s %7s  %s",
                        "method", "GPU tx MB", "srv rx MB", "enc ms", "nvl ms", "push ms",
                        "srv ms", "pull ms", "dec ms", "comm ms", "expo ms", "step ms", "xFP32",
                        "xBF16", "xFP8", "bottleneck"));
      json rows = json::array();
      for (const StepPrediction& p : preds) {
        auto vs = [&](const char* ring) {
          auto it = ring_step.find(ring);
          return it == ring_step.end() || p.step_s <= 0 ? 0.0 : it->second / p.step_s;
        };
        WriteLine(os, absl::StrFormat(
                          "%-22s %9.2f %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f "
                          "%9.2f %7.3f %7.3f %7.3f  %s",
                          p.label, p.gpu_tx_bytes * 1e-6, p.server_rx_bytes * 1e-6,
                          p.worker_encode_s * 1e3, p.intra_node_s * 1e3, p.push_s * 1e3,
                          p.server_s * 1e3, p.pull_s * 1e3, p.worker_decode_s * 1e3,
                          p.comm_s * 1e3, p.exposed_s * 1e3, p.step_s * 1e3, vs("fp32-ring"),
                          vs("bf16-ring"), vs("fp8-ring"), p.bottleneck));
        json j = PredictionJson(p);
        j["speedup_vs_fp32_ring"] = vs("fp32-ring");
        j["speedup_vs_bf16_ring"] = vs("bf16-ring");
        j["speedup_vs_fp8_ring"] = vs("fp8-ring");
        rows.push_back(std::move(j));
      }
      configs.push_back({{"gpus", gpus}, {"servers", servers}, {"methods", rows}});
    }
    os << "server sizing at " << gpus << " GPUs (NIC-bound: servers' NICs and reduce never "
       << "slower than the workers' links; target: step within "
       << absl::StrFormat("%.1f", 100 * o.target_tolerance) << " % of that):\n";
    for (const json& s : sizing) {
      os << absl::StrFormat("  %-18s NIC-bound %s, for target %d (step %.2f ms)\n",
                            s["method"].get<std::string>(),
                            s["servers_nic_bound"].get<int>() > 0
                                ? absl::StrCat(s["servers_nic_bound"].get<int>())
                                : absl::StrCat("> ", max_servers),
                            s["servers_for_target"].get<int>(),
                            s["step_at_target_s"].get<double>() * 1e3);
    }
    configs.back()["sizing"] = sizing;
  }

  json rates = json::object();
  for (const MethodSetup& m : setups) {
    json r = json::object();
    for (const auto& [op, x] : m.rates) r[op] = {{"bps", x.bps}, {"source", x.source}};
    rates[m.config.label] = {{"rates", r},
                             {"push_bytes_per_element", m.config.push_bytes_per_element},
                             {"pull_bytes_per_element", m.config.pull_bytes_per_element}};
  }
  json doc = {{"command", "model"},
              {"predicted_not_measured", true},
              {"model",
               {{"tensors", tensors.size()},
                {"elements", plain.elements},
                {"transformed_elements", with_transform.transformed_elements},
                {"transform_flops_per_direction", with_transform.transform_flops},
                {"rank", o.rank}}},
              {"inputs",
               {{"gpus_per_node", o.gpus_per_node},
                {"link_gbit", o.link_gbit},
                {"link_latency_us", o.link_latency_us},
                {"link_efficiency", o.link_efficiency},
                {"server_gbit", o.server_gbit > 0 ? o.server_gbit : o.link_gbit},
                {"nvlink_gbyte", o.nvlink_gbyte},
                {"push_codec", o.push_codec},
                {"pull_codec", o.pull_codec},
                {"push_pull_overlap", o.push_pull_overlap},
                {"forward_s", compute.forward_s},
                {"backward_s", compute.backward_s},
                {"compute_basis", compute_basis},
                {"backward_overlap", compute.backward_overlap},
                {"bucket_mib", o.bucket_mib},
                {"ops_on_compute", o.ops_on_compute},
                {"ops_overlap", o.ops_overlap},
                {"worker_contention", o.worker_contention},
                {"server_contention", o.server_contention},
                {"hbm_gbyte", o.hbm_gbyte},
                {"hbm_efficiency", o.hbm_efficiency},
                {"hierarchy_node_modelled_only", true}}},
              {"cost_sources", costs.sources},
              {"methods", rates},
              {"configs", configs}};
  return out.WriteJson(doc);
}

}  // namespace

absl::Status RunModelBench(const ModelBenchOptions& options) { return Run(options); }

Command AddModelCommand(CLI::App& parent) {
  auto o = std::make_shared<ModelBenchOptions>();
  CLI::App* app = parent.add_subcommand(
      "model", "predicted step time: ring all-reduces against the GIFT-PS service (no measuring)");
  app->add_option("--tensors-json", o->tensors_json,
                  "tensor list (gift-bench cluster --list-tensors); else Llama-style blocks");
  app->add_option("--d-model", o->d_model, "Llama-style width d")->capture_default_str();
  app->add_option("--layers", o->layers, "Llama-style blocks (0: from --params)");
  app->add_option("--params", o->params, "parameter count (with --layers 0)");
  app->add_option("--ffn-mult", o->ffn_mult, "MLP width / d")->capture_default_str();
  app->add_option("--vocab", o->vocab, "vocabulary (embedding + untied head); 0: none");
  app->add_option("--gpus", o->gpus, "data-parallel GPUs (workers), a list")->delimiter(',');
  app->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node")->capture_default_str();
  app->add_option("--link-gbit", o->link_gbit, "each GPU's link, Gbit/s per direction")
      ->capture_default_str();
  app->add_option("--link-latency-us", o->link_latency_us, "per message on the link");
  app->add_option("--link-efficiency", o->link_efficiency, "goodput / rate (headers)")
      ->capture_default_str();
  app->add_option("--nvlink-gbyte", o->nvlink_gbyte, "NVLink GB/s per GPU per direction")
      ->capture_default_str();
  app->add_option("--nvlink-latency-us", o->nvlink_latency_us, "per NVLink step");
  app->add_option("--servers", o->servers, "server counts, a list (0: sized to the NICs)")
      ->delimiter(',');
  app->add_option("--server-gbit", o->server_gbit, "each server's NIC (0: the link's)");
  app->add_option("--push-codec", o->push_codec, "push codec spec")->capture_default_str();
  app->add_option("--pull-codec", o->pull_codec, "pull codec spec")->capture_default_str();
  app->add_option("--rank", o->rank, "GIFT transform rank per side")->capture_default_str();
  app->add_option("--transform-only", o->transform_only,
                  "transform only 2-D tensors whose name contains one of these")
      ->delimiter(',');
  app->add_option("--methods", o->methods,
                  "of fp32-ring, bf16-ring, fp8-ring, fp32-service, direct, gift")
      ->delimiter(',');
  app->add_option("--hierarchy", o->hierarchy, "service: none, node (modelled only), a list")
      ->delimiter(',');
  app->add_option("--push-pull-overlap", o->push_pull_overlap, "0 = push + pull, 1 = max")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--forward-ms", o->forward_ms, "forward time per step");
  app->add_option("--backward-ms", o->backward_ms, "backward time per step");
  app->add_option("--tokens-per-gpu", o->tokens_per_gpu,
                  "with forward/backward 0: compute = 6 N tokens / (MFU peak)");
  app->add_option("--mfu", o->mfu, "model FLOP utilization")->capture_default_str();
  app->add_option("--peak-tflops", o->peak_tflops, "dense peak (GH200 BF16: 989)")
      ->capture_default_str();
  app->add_option("--backward-overlap", o->backward_overlap,
                  "fraction of backward that can hide communication")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--bucket-mib", o->bucket_mib, "last gradient bucket, never hidden (FP32 MiB)");
  app->add_flag("--ops-on-compute", o->ops_on_compute,
                "worker transform/encode/decode run on the GPU (add to compute)");
  app->add_option("--ops-overlap", o->ops_overlap, "else: ops vs network, 0 = sum, 1 = max")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--costs", o->costs, "JSON of gift-bench codec/transform/cluster runs")
      ->delimiter(',');
  app->add_option("--costs-threads", o->costs_threads,
                  "codec and transform rates at this thread count (0: the largest measured)");
  app->add_option("--encode-gbps", o->encode_gbps, "worker encode / ring cast, GB/s of FP32");
  app->add_option("--decode-gbps", o->decode_gbps, "worker decode, GB/s of FP32");
  app->add_option("--reduce-gbps", o->reduce_gbps, "server decode-accumulate per push");
  app->add_option("--server-encode-gbps", o->server_encode_gbps, "server encode of the pull");
  app->add_option("--ring-reduce-gbps", o->ring_reduce_gbps, "the ring's sums (gloo on CPU)");
  app->add_option("--transform-gflops", o->transform_gflops, "worker transform GFLOP/s");
  app->add_option("--hbm-gbyte", o->hbm_gbyte,
                  "estimate unset worker op rates as HBM-bound at this GB/s (an assumption)");
  app->add_option("--hbm-efficiency", o->hbm_efficiency, "fraction of HBM those estimates get")
      ->capture_default_str();
  app->add_option("--worker-contention", o->worker_contention,
                  "worker op times x this (daemons sharing cores)")
      ->capture_default_str();
  app->add_option("--server-contention", o->server_contention, "server op times x this")
      ->capture_default_str();
  app->add_option("--target-tolerance", o->target_tolerance, "server sizing target")
      ->capture_default_str();
  app->add_option("--max-servers", o->max_servers, "sizing limit (0: the GPU count)");
  app->add_option("--json", o->json_path, "write JSON here ('-' = stdout, table to stderr)");
  return {app, [o] { return RunModelBench(*o); }};
}

}  // namespace gift::bench
