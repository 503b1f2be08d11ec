#include "bench/step_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::bench {
namespace {

// t = amount / rate, with rate 0 meaning "free".
double TimeAt(double amount, double rate) { return rate > 0 ? amount / rate : 0.0; }

bool InUnit(double x) { return x >= 0 && x <= 1; }

absl::Status Check(bool ok, const char* what) {
  return ok ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat("step model: ", what));
}

absl::Status Validate(const ModelTotals& totals, const Cluster& c, const OpRates& ops,
                      const Compute& compute, const MethodConfig& m) {
  absl::Status s;
  s.Update(Check(totals.elements > 0, "the model has no elements"));
  s.Update(Check(c.gpus >= 1, "gpus must be >= 1"));
  s.Update(Check(c.gpus_per_node >= 1, "gpus per node must be >= 1"));
  s.Update(Check(c.link_bps > 0, "link bandwidth must be > 0"));
  s.Update(Check(c.link_latency_s >= 0 && c.nvlink_latency_s >= 0, "latency must be >= 0"));
  s.Update(Check(c.link_efficiency > 0 && c.link_efficiency <= 1, "link efficiency in (0, 1]"));
  s.Update(Check(ops.worker_contention >= 1 && ops.server_contention >= 1, "contention >= 1"));
  s.Update(Check(ops.encode_bps >= 0 && ops.decode_bps >= 0 && ops.reduce_bps >= 0 &&
                     ops.server_encode_bps >= 0 && ops.transform_flops_per_s >= 0 &&
                     ops.ring_reduce_bps >= 0,
                 "op rates must be >= 0"));
  s.Update(Check(compute.forward_s >= 0 && compute.backward_s >= 0 && compute.bucket_bytes >= 0,
                 "compute times and bucket bytes must be >= 0"));
  s.Update(Check(InUnit(compute.backward_overlap) && InUnit(compute.ops_overlap) &&
                     InUnit(m.push_pull_overlap),
                 "overlaps must be in [0, 1]"));
  if (m.method == Method::kRing) {
    s.Update(Check(m.bytes_per_element > 0, "bytes per element must be > 0"));
  } else {
    s.Update(Check(m.push_bytes_per_element > 0 && m.pull_bytes_per_element > 0,
                   "push and pull bytes per element must be > 0"));
    s.Update(Check(m.servers >= 1, "servers must be >= 1"));
    s.Update(Check(m.server_bps > 0, "server NIC bandwidth must be > 0"));
    if (m.hierarchy == Hierarchy::kNode) {
      s.Update(Check(c.gpus % c.gpus_per_node == 0, "gpus must be a multiple of gpus per node"));
      s.Update(Check(c.gpus_per_node == 1 || c.nvlink_bps > 0,
                     "node-local aggregation needs an NVLink bandwidth"));
    }
  }
  return s;
}

// The exposed part of `comm` given backward, and the step.
void FinishStep(const Compute& compute, double elements, StepPrediction& p) {
  const double hidden_budget = compute.backward_overlap * compute.backward_s;
  const double tail =
      compute.bucket_bytes > 0 ? p.comm_s * std::min(1.0, compute.bucket_bytes / (4 * elements))
                               : 0.0;
  p.exposed_s = std::max({p.comm_s - hidden_budget, tail, 0.0});
  p.step_s = p.compute_s + p.exposed_s;
}

StepPrediction PredictRing(const ModelTotals& totals, const Cluster& c, const OpRates& ops,
                           const Compute& compute, const MethodConfig& m) {
  StepPrediction p;
  p.label = m.label;
  const double E = static_cast<double>(totals.elements);
  const double P = c.gpus;
  const double wire = 2 * (P - 1) / P * E * m.bytes_per_element;
  p.gpu_tx_bytes = p.gpu_rx_bytes = wire;
  p.network_s = wire / (c.link_efficiency * c.link_bps) + 2 * (P - 1) * c.link_latency_s;
  if (m.ring_cast) {
    p.worker_encode_s = TimeAt(4 * E, ops.encode_bps) * ops.worker_contention;
    p.worker_decode_s = TimeAt(4 * E, ops.decode_bps) * ops.worker_contention;
  }
  p.server_s = 0;
  const double sums = TimeAt((P - 1) / P * E * 4, ops.ring_reduce_bps) * ops.worker_contention;
  const double worker_ops = p.worker_encode_s + p.worker_decode_s;
  p.compute_s = compute.forward_s + compute.backward_s;
  if (compute.ops_on_compute) {
    p.compute_s += worker_ops;
    p.comm_s = Combine(p.network_s, sums, compute.ops_overlap);
  } else {
    p.comm_s = Combine(p.network_s, sums + worker_ops, compute.ops_overlap);
  }
  p.bottleneck = p.network_s >= sums ? "link" : "ring reduce";
  FinishStep(compute, E, p);
  return p;
}

StepPrediction PredictService(const ModelTotals& totals, const Cluster& c, const OpRates& ops,
                              const Compute& compute, const MethodConfig& m) {
  StepPrediction p;
  p.label = m.label;
  const double E = static_cast<double>(totals.elements);
  const double P = c.gpus;
  const double G = m.hierarchy == Hierarchy::kNode ? c.gpus_per_node : 1;
  const double S = m.servers;
  const double pushers = P / G;  // pushes each server receives per element of its shard
  const double slice = E / G;    // elements one GPU encodes and pushes
  const double link = c.link_efficiency * c.link_bps;
  const double nic = c.link_efficiency * m.server_bps;

  p.gpu_tx_bytes = slice * m.push_bytes_per_element;
  p.gpu_rx_bytes = slice * m.pull_bytes_per_element;
  p.server_rx_bytes = pushers * E * m.push_bytes_per_element / S;
  p.server_tx_bytes = pushers * E * m.pull_bytes_per_element / S;
  const double push_link = p.gpu_tx_bytes / link, push_nic = p.server_rx_bytes / nic;
  const double pull_link = p.gpu_rx_bytes / link, pull_nic = p.server_tx_bytes / nic;
  p.push_s = std::max(push_link, push_nic) + c.link_latency_s;
  p.pull_s = std::max(pull_link, pull_nic) + c.link_latency_s;
  p.network_s = Combine(p.push_s, p.pull_s, m.push_pull_overlap);

  if (G > 1) {
    // FP32 reduce-scatter before the push, all-gather of the encoded pull after.
    const double rs = (G - 1) / G * E * 4, ag = (G - 1) / G * E * m.pull_bytes_per_element;
    p.nvlink_bytes = rs + ag;
    p.intra_node_s = (rs + ag) / c.nvlink_bps + 2 * (G - 1) * c.nvlink_latency_s;
  }

  const double wc = ops.worker_contention;
  const double flops = m.transform ? totals.transform_flops : 0.0;
  if (m.encode) {
    p.worker_encode_s = TimeAt(4 * slice, ops.encode_bps) * wc;
    p.worker_decode_s = TimeAt(4 * E, ops.decode_bps) * wc;
  }
  p.worker_encode_s += TimeAt(flops / G, ops.transform_flops_per_s) * wc;
  p.worker_decode_s += TimeAt(flops, ops.transform_flops_per_s) * wc;
  p.server_s = (TimeAt(pushers * E / S * 4, ops.reduce_bps) +
                TimeAt(E / S * 4, ops.server_encode_bps)) *
               ops.server_contention;

  const double worker_ops = p.worker_encode_s + p.worker_decode_s;
  const double moving = p.intra_node_s + p.network_s;
  p.compute_s = compute.forward_s + compute.backward_s;
  if (compute.ops_on_compute) {
    p.compute_s += worker_ops;
    p.comm_s = Combine(moving, p.server_s, compute.ops_overlap);
  } else {
    p.comm_s = Combine(moving, p.server_s + worker_ops, compute.ops_overlap);
  }

  struct Part {
    const char* name;
    double s;
  };
  const Part parts[] = {{"worker link", std::max(push_link, pull_link)},
                        {"server NIC", std::max(push_nic, pull_nic)},
                        {"server reduce", p.server_s},
                        {"worker ops", worker_ops},
                        {"NVLink", p.intra_node_s}};
  const Part* top = std::max_element(std::begin(parts), std::end(parts),
                                     [](const Part& a, const Part& b) { return a.s < b.s; });
  p.bottleneck = top->name;
  FinishStep(compute, E, p);
  return p;
}

uint64_t SideRank(int rank, uint64_t n) {
  return std::min<uint64_t>(static_cast<uint64_t>(std::max(rank, 0)), n);
}

}  // namespace

double Combine(double a, double b, double overlap) {
  return (1 - overlap) * (a + b) + overlap * std::max(a, b);
}

ModelTotals Totals(const std::vector<ModelTensor2D>& tensors, bool transform, int rank) {
  ModelTotals t;
  for (const ModelTensor2D& x : tensors) {
    const uint64_t n = x.rows * x.cols;
    t.elements += n;
    if (transform && x.rows > 1 && x.cols > 1) {
      t.transformed_elements += n;
      t.transform_flops += 4.0 * static_cast<double>(n) *
                           static_cast<double>(SideRank(rank, x.rows) + SideRank(rank, x.cols));
    }
  }
  return t;
}

std::vector<ModelTensor2D> LlamaTensors(int64_t d_model, int layers, double params,
                                        double ffn_mult, int64_t vocab) {
  const auto d = static_cast<uint64_t>(std::max<int64_t>(d_model, 1));
  const auto ff = static_cast<uint64_t>(std::max<int64_t>(
      std::llround(ffn_mult * static_cast<double>(d_model)), 1));
  const auto v = static_cast<uint64_t>(std::max<int64_t>(vocab, 0));
  if (layers <= 0) {
    const double per_block = static_cast<double>(4 * d * d + 3 * d * ff + 2 * d);
    const double fixed = static_cast<double>(2 * v * d);
    layers = std::max(1, static_cast<int>(std::llround((params - fixed) / per_block)));
  }
  std::vector<ModelTensor2D> out;
  if (v > 0) out.push_back({"embed.weight", v, d});
  for (int l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    for (const char* m : {"q", "k", "v", "o"}) out.push_back({absl::StrCat(p, "attn.", m), d, d});
    out.push_back({p + "mlp.gate", ff, d});
    out.push_back({p + "mlp.up", ff, d});
    out.push_back({p + "mlp.down", d, ff});
    out.push_back({p + "attn_norm", 1, d});
    out.push_back({p + "mlp_norm", 1, d});
  }
  if (v > 0) out.push_back({"lm_head.weight", v, d});
  return out;
}

absl::StatusOr<StepPrediction> PredictStep(const ModelTotals& totals, const Cluster& cluster,
                                           const OpRates& ops, const Compute& compute,
                                           const MethodConfig& method) {
  if (absl::Status s = Validate(totals, cluster, ops, compute, method); !s.ok()) return s;
  return method.method == Method::kRing ? PredictRing(totals, cluster, ops, compute, method)
                                        : PredictService(totals, cluster, ops, compute, method);
}

absl::StatusOr<ServerSizing> SizeServers(const ModelTotals& totals, const Cluster& cluster,
                                         const OpRates& ops, const Compute& compute,
                                         MethodConfig method, double tolerance,
                                         int max_servers) {
  if (method.method != Method::kService) {
    return absl::InvalidArgumentError("step model: server sizing needs a service method");
  }
  if (max_servers < 1 || !(tolerance >= 0)) {
    return absl::InvalidArgumentError("step model: max_servers >= 1 and tolerance >= 0");
  }
  std::vector<StepPrediction> by_servers;
  ServerSizing out;
  for (int s = 1; s <= max_servers; ++s) {
    method.servers = s;
    absl::StatusOr<StepPrediction> p = PredictStep(totals, cluster, ops, compute, method);
    if (!p.ok()) return p.status();
    by_servers.push_back(*p);
    const double link = cluster.link_efficiency * cluster.link_bps;
    const double nic = cluster.link_efficiency * method.server_bps;
    const bool nic_ok = p->server_rx_bytes / nic <= p->gpu_tx_bytes / link * (1 + 1e-12) &&
                        p->server_tx_bytes / nic <= p->gpu_rx_bytes / link * (1 + 1e-12);
    const bool reduce_ok = p->server_s <= p->gpu_tx_bytes / link * (1 + 1e-12);
    if (nic_ok && reduce_ok) {
      out.nic_bound = s;
      break;
    }
  }
  const StepPrediction& ref = by_servers.back();
  out.step_at_nic_bound_s = out.nic_bound > 0 ? ref.step_s : 0.0;
  for (size_t i = 0; i < by_servers.size(); ++i) {
    if (by_servers[i].step_s <= ref.step_s * (1 + tolerance)) {
      out.for_target = static_cast<int>(i) + 1;
      out.step_at_target_s = by_servers[i].step_s;
      break;
    }
  }
  return out;
}

}  // namespace gift::bench
