// The GPU part of `gift-bench codec`. Host code only (the kernels are in
// gift_codec_cuda); compiled when GIFT_BENCH_WITH_CUDA.
//
// Timing: CUDA events recorded on the bench's stream around each call. The
// codec calls synchronize their stream before returning (codec_cuda.h), so
// a measured call includes that synchronization and any gaps between its
// kernels: it is the time a caller waits, not only the kernels' time.
#include "bench/codec_bench_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/codec_ops.h"
#include "bench/cuda_bench_util.h"
#include "common/base/status_macros.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/reduce.h"
#include "kernels/codec/codec_cuda.h"

namespace gift::bench {
namespace {

constexpr double kGpuEffectiveBandwidthTarget = 0.8;  // x the device copy's effective bandwidth

// An encoded tensor in device memory.
struct DeviceEncoded {
  codec::CodecSpec spec;
  uint64_t rows = 0, cols = 0;
  DeviceBuffer codes, scales;

  static absl::StatusOr<DeviceEncoded> Allocate(const codec::CodecSpec& spec, uint64_t rows,
                                                uint64_t cols) {
    GIFT_ASSIGN_OR_RETURN(codec::EncodedLayout l, codec::ComputeLayout(spec, rows, cols));
    DeviceEncoded d{spec, rows, cols, {}, {}};
    GIFT_ASSIGN_OR_RETURN(d.codes, DeviceBuffer::Allocate(l.code_bytes));
    GIFT_ASSIGN_OR_RETURN(d.scales, DeviceBuffer::Allocate(l.scale_bytes));
    return d;
  }
  static absl::StatusOr<DeviceEncoded> Upload(const codec::EncodedTensor& t) {
    DeviceEncoded d{t.spec(), t.layout().rows, t.layout().cols, {}, {}};
    GIFT_ASSIGN_OR_RETURN(d.codes, DeviceBuffer::Upload(t.codes().data(), t.codes().size()));
    GIFT_ASSIGN_OR_RETURN(d.scales, DeviceBuffer::Upload(t.scales().data(), t.scales().size()));
    return d;
  }
  codec::MutableEncodedView mutable_view() const {
    return codec::MutableEncodedView{spec, rows, cols, codes.bytes(), scales.bytes()};
  }
  codec::EncodedView view() const { return mutable_view(); }
  // Copies codes and scales into `t` (same spec and shape).
  absl::Status Download(codec::EncodedTensor& t) const {
    GIFT_RETURN_IF_ERROR(codes.Download(t.codes().data()));
    return scales.Download(t.scales().data());
  }
};

// Bitwise comparison of two byte ranges (and two float arrays as bit
// patterns): number of differing units and the first one.
struct Comparison {
  uint64_t mismatches = 0;
  uint64_t first = 0;
  bool identical() const { return mismatches == 0; }
  nlohmann::json ToJson() const {
    nlohmann::json j = {{"identical", identical()}, {"mismatches", mismatches}};
    if (!identical()) j["first_mismatch"] = first;
    return j;
  }
};

void CompareInto(Comparison& c, const uint8_t* a, const uint8_t* b, size_t n, uint64_t offset) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) {
      if (c.mismatches == 0) c.first = offset + i;
      ++c.mismatches;
    }
  }
}

// Codes then scales, as one byte stream.
Comparison CompareEncoded(const codec::EncodedTensor& a, const codec::EncodedTensor& b) {
  Comparison c;
  CompareInto(c, a.codes().data(), b.codes().data(), a.codes().size(), 0);
  CompareInto(c, a.scales().data(), b.scales().data(), a.scales().size(), a.codes().size());
  return c;
}

// Element by element, as bit patterns.
Comparison CompareFloats(const std::vector<float>& a, const std::vector<float>& b) {
  Comparison c;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    if (ua != ub) {
      if (c.mismatches == 0) c.first = i;
      ++c.mismatches;
    }
  }
  return c;
}

const char* YesNo(const Comparison& c) { return c.identical() ? "yes" : "no"; }

std::string DeviceDescription() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "CUDA device";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return absl::StrCat("CUDA device ", dev);
  return absl::StrFormat("%s (device %d, sm_%d%d, %.0f GiB)", prop.name, dev, prop.major,
                         prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

}  // namespace

std::string GpuUnavailableReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it
    return absl::StrCat("no usable CUDA device (cudaGetDeviceCount: ", cudaGetErrorString(err),
                        ")");
  }
  if (count == 0) return "no CUDA device found";
  if (!kernels::CudaDeviceAvailable()) return "kernels::CudaDeviceAvailable() is false";
  return "";
}

absl::StatusOr<nlohmann::json> RunGpuCodecBench(const GpuBenchConfig& config, std::ostream& os) {
  if (config.input == nullptr || config.input->size() != config.rows * config.cols) {
    return absl::InvalidArgumentError("GPU bench: input does not match rows x cols");
  }
  const std::vector<float>& x = *config.input;
  const uint64_t n = x.size();
  const double fp32_bytes = 4.0 * static_cast<double>(n);
  const codec::CodecOptions cpu_opts{.pool = config.pool, .use_simd = config.use_simd};
  const codec::RngKey key{.tensor = 1, .step = 0, .rank = 0};
  const float post_scale = 1.0f / static_cast<float>(config.reduce_inputs);

  Stream stream;
  GIFT_RETURN_IF_ERROR(stream.Init());
  EventPair ev;
  GIFT_RETURN_IF_ERROR(ev.Init());
  const cudaStream_t s = stream.get();

  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_x, DeviceBuffer::Upload(x.data(), n * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_y, DeviceBuffer::Allocate(n * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_acc, DeviceBuffer::Allocate(n * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_sum, DeviceBuffer::Allocate(n * sizeof(float)));

  const std::string device = DeviceDescription();
  os << "GPU: " << device << "\n"
     << absl::StrFormat(
            "CUDA events, median of %d runs after 1 warm-up; each codec call includes its own "
            "stream synchronize.\nx copy = effective bandwidth / the device copy's effective "
            "bandwidth (2 x 4n bytes / time).\n",
            config.reps);

  // ---- the device copy baseline ------------------------------------------------
  GIFT_ASSIGN_OR_RETURN(Timing copy, TimeOnDevice(config.reps, s, ev, [&] {
                          return CudaStatus(
                              cudaMemcpyAsync(d_y.bytes(), d_x.bytes(), n * sizeof(float),
                                              cudaMemcpyDeviceToDevice, s),
                              "cudaMemcpyAsync");
                        }));
  const Rates copy_rates =
      ComputeRates(copy.median_s, fp32_bytes, Traffic{fp32_bytes, fp32_bytes}, copy.median_s);

  nlohmann::json doc;
  doc["ran"] = true;
  doc["device"] = device;
  doc["timing"] = "cudaEvent around each call (includes the call's stream synchronize)";
  doc["copy"] = {{"median_s", copy.median_s},
                 {"samples_s", copy.seconds},
                 {"input_gbps", copy_rates.input_gbps},
                 {"effective_gbps", copy_rates.effective_gbps}};
  doc["ops"] = nlohmann::json::array();
  doc["targets"] = nlohmann::json::array();
  doc["bit_exact"] = nlohmann::json::array();

  os << absl::StrFormat("%-16s %-10s %9s %9s %9s %7s  %s\n", "spec", "op", "ms", "in GB/s",
                        "eff GB/s", "x copy", "target");
  os << absl::StrFormat("%-16s %-10s %9.4f %9.1f %9.1f %6.2fx\n", "(baseline)", "D2D copy",
                        copy.median_s * 1e3, copy_rates.input_gbps, copy_rates.effective_gbps, 1.0);
  os.flush();

  std::vector<std::string> exact_lines;
  // One spec: bit-exactness, then throughput. A failure ends this spec only.
  auto run_spec = [&](const codec::CodecSpec& spec, const std::string& name) -> absl::Status {
    auto fail = [&](const absl::Status& st, const std::string& what) {
      return absl::Status(st.code(), absl::StrCat(what, " ", name, ": ", st.message()));
    };

    // ---- bit-exactness against the CPU codec, same data and keys ---------------
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor cpu_enc,
                          codec::EncodedTensor::Create(spec, config.rows, config.cols));
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor gpu_enc,
                          codec::EncodedTensor::Create(spec, config.rows, config.cols));
    GIFT_RETURN_IF_ERROR(codec::Encode(x.data(), cpu_enc.mutable_view(), key, cpu_opts));
    GIFT_ASSIGN_OR_RETURN(DeviceEncoded d_enc,
                          DeviceEncoded::Allocate(spec, config.rows, config.cols));
    if (absl::Status st = kernels::EncodeCuda(d_x.floats(), d_enc.mutable_view(), key, s);
        !st.ok()) {
      return fail(st, "EncodeCuda");
    }
    GIFT_RETURN_IF_ERROR(d_enc.Download(gpu_enc));
    const Comparison enc_cmp = CompareEncoded(gpu_enc, cpu_enc);

    // Decode and decode-accumulate of the CPU's codes on both sides.
    GIFT_ASSIGN_OR_RETURN(DeviceEncoded d_cpu_enc, DeviceEncoded::Upload(cpu_enc));
    std::vector<float> cpu_out(n), gpu_out(n);
    GIFT_RETURN_IF_ERROR(codec::Decode(cpu_enc.view(), cpu_out.data(), cpu_opts));
    if (absl::Status st = kernels::DecodeCuda(d_cpu_enc.view(), d_y.floats(), false, s); !st.ok()) {
      return fail(st, "DecodeCuda");
    }
    GIFT_RETURN_IF_ERROR(d_y.Download(gpu_out.data()));
    const Comparison dec_cmp = CompareFloats(gpu_out, cpu_out);

    cpu_out = x;
    GIFT_RETURN_IF_ERROR(codec::DecodeAccumulate(cpu_enc.view(), cpu_out.data(), cpu_opts));
    GIFT_BENCH_CUDA(
        cudaMemcpy(d_acc.bytes(), d_x.bytes(), n * sizeof(float), cudaMemcpyDeviceToDevice));
    if (absl::Status st = kernels::DecodeCuda(d_cpu_enc.view(), d_acc.floats(), true, s);
        !st.ok()) {
      return fail(st, "DecodeCuda(accumulate)");
    }
    GIFT_RETURN_IF_ERROR(d_acc.Download(gpu_out.data()));
    const Comparison acc_cmp = CompareFloats(gpu_out, cpu_out);

    // Reduce of the same CPU-encoded inputs.
    GIFT_ASSIGN_OR_RETURN(
        std::vector<codec::EncodedTensor> inputs,
        MakeReduceInputs(spec, x, config.rows, config.cols, config.reduce_inputs, config.pool));
    std::vector<codec::EncodedView> cpu_views;
    std::vector<DeviceEncoded> d_inputs;
    std::vector<codec::EncodedView> gpu_views;
    for (const codec::EncodedTensor& t : inputs) {
      cpu_views.push_back(t.view());
      GIFT_ASSIGN_OR_RETURN(DeviceEncoded d, DeviceEncoded::Upload(t));
      d_inputs.push_back(std::move(d));
    }
    for (const DeviceEncoded& d : d_inputs) gpu_views.push_back(d.view());
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor cpu_red,
                          codec::EncodedTensor::Create(spec, config.rows, config.cols));
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor gpu_red,
                          codec::EncodedTensor::Create(spec, config.rows, config.cols));
    GIFT_ASSIGN_OR_RETURN(DeviceEncoded d_red,
                          DeviceEncoded::Allocate(spec, config.rows, config.cols));
    GIFT_RETURN_IF_ERROR(codec::ReduceEncoded(cpu_views, cpu_out.data(), post_scale,
                                              cpu_red.mutable_view(), key, cpu_opts));
    if (absl::Status st = kernels::ReduceCuda(gpu_views, d_sum.floats(), post_scale,
                                              d_red.mutable_view(), key, s);
        !st.ok()) {
      return fail(st, "ReduceCuda");
    }
    GIFT_RETURN_IF_ERROR(d_sum.Download(gpu_out.data()));
    GIFT_RETURN_IF_ERROR(d_red.Download(gpu_red));
    const Comparison sum_cmp = CompareFloats(gpu_out, cpu_out);
    const Comparison red_cmp = CompareEncoded(gpu_red, cpu_red);

    doc["bit_exact"].push_back({{"spec", name},
                                {"encode", enc_cmp.ToJson()},
                                {"decode", dec_cmp.ToJson()},
                                {"decode_accumulate", acc_cmp.ToJson()},
                                {"reduce_sum", sum_cmp.ToJson()},
                                {"reduce_encoded", red_cmp.ToJson()}});
    exact_lines.push_back(absl::StrFormat("%-16s %-7s %-7s %-11s %-11s %-11s", name, YesNo(enc_cmp),
                                          YesNo(dec_cmp), YesNo(acc_cmp), YesNo(sum_cmp),
                                          YesNo(red_cmp)));

    // ---- throughput --------------------------------------------------------------
    GIFT_BENCH_CUDA(
        cudaMemcpy(d_acc.bytes(), d_x.bytes(), n * sizeof(float), cudaMemcpyDeviceToDevice));
    const codec::EncodedLayout layout = gpu_enc.layout();
    for (CodecOp op : kAllCodecOps) {
      std::function<absl::Status()> fn;
      switch (op) {
        case CodecOp::kEncode:
          fn = [&] { return kernels::EncodeCuda(d_x.floats(), d_enc.mutable_view(), key, s); };
          break;
        case CodecOp::kDecode:
          fn = [&] { return kernels::DecodeCuda(d_enc.view(), d_y.floats(), false, s); };
          break;
        case CodecOp::kDecodeAccumulate:
          fn = [&] { return kernels::DecodeCuda(d_enc.view(), d_acc.floats(), true, s); };
          break;
        case CodecOp::kReduce:
          fn = [&] {
            return kernels::ReduceCuda(gpu_views, d_sum.floats(), post_scale, d_red.mutable_view(),
                                       key, s);
          };
          break;
      }
      absl::StatusOr<Timing> t = TimeOnDevice(config.reps, s, ev, fn);
      if (!t.ok()) return fail(t.status(), absl::StrCat("GPU ", CodecOpName(op)));
      const Traffic traffic = TrafficOf(op, layout, config.reduce_inputs);
      const Rates r = ComputeRates(t->median_s, fp32_bytes, traffic, copy.median_s);
      const bool has_target = op == CodecOp::kEncode || op == CodecOp::kDecode;
      const bool pass = r.effective_ratio >= kGpuEffectiveBandwidthTarget;
      WriteLine(os,
                absl::StrFormat("%-16s %-10s %9.4f %9.1f %9.1f %6.2fx  %s", name, CodecOpName(op),
                                r.median_s * 1e3, r.input_gbps, r.effective_gbps, r.effective_ratio,
                                has_target ? (pass ? "PASS" : "MISS") : ""));
      os.flush();
      doc["ops"].push_back({{"spec", name},
                            {"op", CodecOpName(op)},
                            {"median_s", t->median_s},
                            {"samples_s", t->seconds},
                            {"bytes_read", traffic.read},
                            {"bytes_written", traffic.written},
                            {"input_gbps", r.input_gbps},
                            {"effective_gbps", r.effective_gbps},
                            {"effective_ratio_vs_copy", r.effective_ratio},
                            {"input_ratio_vs_copy", r.input_ratio}});
      if (has_target) {
        doc["targets"].push_back({{"spec", name},
                                  {"op", CodecOpName(op)},
                                  {"effective_ratio_vs_copy", r.effective_ratio},
                                  {"target", kGpuEffectiveBandwidthTarget},
                                  {"pass", pass}});
      }
    }
    return absl::OkStatus();
  };

  doc["errors"] = nlohmann::json::array();
  for (const codec::CodecSpec& spec : config.specs) {
    const std::string name = codec::ToString(spec);
    if (absl::Status st = run_spec(spec, name); !st.ok()) {
      os << absl::StrFormat("%-16s GPU error: %s\n", name, std::string(st.message()));
      os.flush();
      exact_lines.push_back(absl::StrFormat("%-16s (not checked: GPU error)", name));
      doc["errors"].push_back({{"spec", name}, {"error", std::string(st.message())}});
    }
  }
  os << absl::StrFormat(
      "target: GPU encode and decode effective bandwidth >= %.2fx the device copy's (PASS/MISS "
      "above)\n",
      kGpuEffectiveBandwidthTarget);

  os << "\nGPU results identical to the CPU codec, bit for bit (same input, same RngKey):\n"
     << absl::StrFormat("%-16s %-7s %-7s %-11s %-11s %s\n", "spec", "encode", "decode",
                        "decode-acc", "reduce sum", "reduce out");
  for (const std::string& line : exact_lines) WriteLine(os, line);
  os.flush();
  return doc;
}

}  // namespace gift::bench
