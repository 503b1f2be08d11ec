// The roles of `gift-bench gpu-share` on the GPU (gpu_share_bench_cuda.h).
// Host code only; compiled when GIFT_BENCH_WITH_CUDA.
#include "bench/gpu_share_bench_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/cuda_bench_util.h"
#include "bench/gpu_share_pacer.h"
#include "bench/synthetic_basis.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "common/transform/tensor_basis.h"
#include "kernels/codec/codec_cuda.h"
#include "kernels/transform/cublas_handle.h"
#include "kernels/transform/transform_cuda.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::CublasStatus;

// One JSON line, flushed, with the wall-clock time it was written ("unix_s":
// the two processes' lines share that clock, so a reader can tell which of
// the worker's windows lie within the trainer's measurement).
void Emit(std::ostream& out, nlohmann::json line) {
  line["unix_s"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  out << line.dump() << std::endl;
}

// The device and the stream priority range, for the "ready" line.
absl::StatusOr<nlohmann::json> DeviceJson(int priority) {
  int dev = 0, least = 0, greatest = 0;
  GIFT_BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  GIFT_BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  GIFT_BENCH_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return nlohmann::json{{"device", prop.name},
                        {"device_index", dev},
                        {"stream_priority", priority},
                        {"priority_least", least},
                        {"priority_greatest", greatest}};
}

// Median, p90, mean, min and max of `seconds`, in ms, into `line`.
void AddStats(const std::vector<double>& seconds, const std::string& prefix, nlohmann::json& line) {
  if (seconds.empty()) return;
  double sum = 0;
  for (const double s : seconds) sum += s;
  line[prefix + "median_ms"] = Median(seconds) * 1e3;
  line[prefix + "p90_ms"] = Percentile(seconds, 0.9) * 1e3;
  line[prefix + "mean_ms"] = sum / static_cast<double>(seconds.size()) * 1e3;
  line[prefix + "min_ms"] = *std::min_element(seconds.begin(), seconds.end()) * 1e3;
  line[prefix + "max_ms"] = *std::max_element(seconds.begin(), seconds.end()) * 1e3;
}

// A device buffer of `count` floats filled with a repeating gradient-like
// pattern (values matter for the power draw of tensor-core products, not
// for FP32 SIMT timing).
absl::StatusOr<DeviceBuffer> PatternBuffer(size_t count, uint64_t seed) {
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(count * sizeof(float)));
  const size_t chunk = std::min<size_t>(count, size_t{1} << 20);
  const std::vector<float> pattern = MakeGradientLikeInput(1, chunk, seed, nullptr);
  for (size_t at = 0; at < count; at += chunk) {
    const size_t n = std::min(chunk, count - at);
    GIFT_BENCH_CUDA(
        cudaMemcpy(b.floats() + at, pattern.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  return b;
}

// One linear layer of the stand-in backward pass: in -> out features.
struct Linear {
  int64_t in = 0;
  int64_t out = 0;
};

}  // namespace

absl::Status RunGpuShareTrainer(const GpuShareOptions& o, const std::atomic<bool>& stop,
                                std::ostream& out) {
  int least = 0, greatest = 0;
  GIFT_BENCH_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int priority = o.priority == "highest" ? greatest : 0;
  Stream stream;
  GIFT_RETURN_IF_ERROR(stream.InitWithPriority(priority));
  kernels::CublasHandle cublas;
  GIFT_RETURN_IF_ERROR(cublas.Init(stream.get()));
  if (o.tf32) {
    GIFT_RETURN_IF_ERROR(CublasStatus(cublasSetMathMode(cublas.get(), CUBLAS_TF32_TENSOR_OP_MATH),
                                      "cublasSetMathMode"));
  }
  const int64_t m = o.tokens, h = o.hidden, f = o.ffn;
  const std::vector<Linear> layer = {{h, 3 * h}, {h, h}, {h, 2 * f}, {f, h}};
  int64_t max_in = 0, max_out = 0, max_weight = 0;
  double flops = 0;  // per iteration
  for (const Linear& l : layer) {
    max_in = std::max(max_in, l.in);
    max_out = std::max(max_out, l.out);
    max_weight = std::max(max_weight, l.in * l.out);
    flops += 2.0 * (2.0 * static_cast<double>(m) * static_cast<double>(l.in) *
                    static_cast<double>(l.out));
  }
  flops *= o.layers;
  // Column-major: X in x M (activations), dY out x M (output gradients),
  // W in x out (weights), dX in x M, dW out x in.
  const auto u = [](int64_t v) { return static_cast<size_t>(v); };
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer x, PatternBuffer(u(max_in * m), 1));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer dy, PatternBuffer(u(max_out * m), 2));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer w, PatternBuffer(u(max_weight), 3));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer dx, DeviceBuffer::Allocate(u(max_in * m) * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer dw, DeviceBuffer::Allocate(u(max_weight) * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  const auto iteration = [&]() -> absl::Status {
    for (int l = 0; l < o.layers; ++l) {
      for (const Linear& lin : layer) {
        const int in = static_cast<int>(lin.in), outf = static_cast<int>(lin.out);
        const int rows = static_cast<int>(m);
        // dX (in x M) = W (in x out) dY (out x M)
        GIFT_RETURN_IF_ERROR(
            CublasStatus(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, in, rows, outf, &one,
                                     w.floats(), in, dy.floats(), outf, &zero, dx.floats(), in),
                         "cublasSgemm dX"));
        // dW (out x in) = dY (out x M) X^T (M x in)
        GIFT_RETURN_IF_ERROR(
            CublasStatus(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, outf, in, rows, &one,
                                     dy.floats(), outf, x.floats(), in, &zero, dw.floats(), outf),
                         "cublasSgemm dW"));
      }
    }
    return CudaStatus(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
  };

  GIFT_ASSIGN_OR_RETURN(nlohmann::json ready, DeviceJson(priority));
  ready["role"] = "trainer";
  ready["event"] = "ready";
  ready["config"] = {{"tokens", m},        {"hidden", h},
                     {"ffn", f},           {"layers", o.layers},
                     {"tf32", o.tf32},     {"seconds", o.seconds},
                     {"warmup", o.warmup}, {"gflop_per_iteration", flops * 1e-9}};
  for (int i = 0; i < o.warmup && !stop.load(); ++i) GIFT_RETURN_IF_ERROR(iteration());
  Emit(out, ready);

  std::vector<double> all, window;
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  while (!stop.load() && SecondsSince(start) < o.seconds) {
    const Clock::time_point t0 = Clock::now();
    GIFT_RETURN_IF_ERROR(iteration());
    const double s = SecondsSince(t0);
    all.push_back(s);
    window.push_back(s);
    if (SecondsSince(window_start) >= o.report_every_s) {
      nlohmann::json line = {{"role", "trainer"},
                             {"event", "window"},
                             {"t_s", SecondsSince(start)},
                             {"iterations", window.size()}};
      AddStats(window, "", line);
      Emit(out, line);
      window.clear();
      window_start = Clock::now();
    }
  }
  const double elapsed = SecondsSince(start);
  nlohmann::json summary = {{"role", "trainer"},
                            {"event", "summary"},
                            {"stopped_by_signal", stop.load()},
                            {"elapsed_s", elapsed},
                            {"iterations", all.size()}};
  AddStats(all, "", summary);
  if (!all.empty()) summary["tflops_at_median"] = flops / Median(all) * 1e-12;
  Emit(out, summary);
  return absl::OkStatus();
}

absl::Status RunGpuShareWorker(const GpuShareOptions& o, const std::atomic<bool>& stop,
                               std::ostream& out) {
  GIFT_ASSIGN_OR_RETURN(const MatrixShape shape, ParseMatrixShape(o.shape, int64_t{1} << 16));
  GIFT_ASSIGN_OR_RETURN(const codec::CodecSpec spec, codec::ParseCodecSpec(o.spec));
  const int64_t rows = shape.rows, cols = shape.cols;
  const size_t count = static_cast<size_t>(rows * cols);
  int least = 0, greatest = 0;
  GIFT_BENCH_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int priority = o.priority == "normal" ? 0 : least;
  Stream stream;
  GIFT_RETURN_IF_ERROR(stream.InitWithPriority(priority));
  const cudaStream_t s = stream.get();

  GIFT_ASSIGN_OR_RETURN(const transform::TensorBasis basis,
                        MakeSyntheticBasis(rows, cols, o.rank, 0.25, o.seed));
  GIFT_ASSIGN_OR_RETURN(
      kernels::TensorBasisCuda gpu,
      kernels::TensorBasisCuda::Create(
          basis, s, o.tf32 ? kernels::TransformMath::kTf32 : kernels::TransformMath::kFp32));
  const std::vector<float> g_host = MakeGradientLikeInput(
      static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), o.seed, nullptr);
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Upload(g_host));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer work, DeviceBuffer::Allocate(count * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer result, DeviceBuffer::Allocate(count * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(const codec::EncodedLayout layout, codec::ComputeLayout(spec, rows, cols));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer codes, DeviceBuffer::Allocate(layout.code_bytes));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer scales, DeviceBuffer::Allocate(layout.scale_bytes));
  const codec::MutableEncodedView enc{spec, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), codes.bytes(), scales.bytes()};
  uint64_t step_index = 0;
  // One step: what the worker's device stage runs per tensor and step
  // (worker/cuda/device_codec_stage.h) without the host copies: the forward
  // transform and encode of the push, the decode and inverse of the result.
  const auto step = [&]() -> absl::Status {
    const codec::RngKey key{.tensor = 1, .step = step_index++, .rank = 0};
    GIFT_RETURN_IF_ERROR(gpu.Forward(g.floats(), rows, cols, work.floats()));
    GIFT_RETURN_IF_ERROR(kernels::EncodeCuda(work.floats(), enc, key, s));  // synchronizes
    GIFT_RETURN_IF_ERROR(kernels::DecodeCuda(enc, work.floats(), false, s));
    GIFT_RETURN_IF_ERROR(gpu.Inverse(work.floats(), rows, cols, result.floats()));
    return CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  };
  GIFT_RETURN_IF_ERROR(step());  // warm-up: cuBLAS heuristics, the codec's scratch

  GIFT_ASSIGN_OR_RETURN(nlohmann::json ready, DeviceJson(priority));
  ready["role"] = "worker";
  ready["event"] = "ready";
  ready["config"] = {{"shape", absl::StrCat(rows, "x", cols)},
                     {"rank", o.rank},
                     {"spec", codec::ToString(spec)},
                     {"rate", o.rate},
                     {"tf32", o.tf32},
                     {"seconds", o.seconds},
                     {"priority", o.priority.empty() ? "lowest" : o.priority}};
  Emit(out, ready);

  std::vector<double> all, window;
  const Clock::time_point start = Clock::now();
  StepPacer pacer(o.rate, start);
  Clock::time_point window_start = start;
  double busy_s = 0;
  while (!stop.load() && SecondsSince(start) < o.seconds) {
    const Clock::time_point at = pacer.Next(Clock::now());
    std::this_thread::sleep_until(at);
    if (stop.load()) break;
    const Clock::time_point t0 = Clock::now();
    GIFT_RETURN_IF_ERROR(step());
    const double sec = SecondsSince(t0);
    busy_s += sec;
    all.push_back(sec);
    window.push_back(sec);
    const double window_s = SecondsSince(window_start);
    if (window_s >= o.report_every_s) {
      nlohmann::json line = {{"role", "worker"},
                             {"event", "window"},
                             {"t_s", SecondsSince(start)},
                             {"window_s", window_s},
                             {"steps", window.size()},
                             {"steps_per_s", static_cast<double>(window.size()) / window_s}};
      AddStats(window, "step_", line);
      Emit(out, line);
      window.clear();
      window_start = Clock::now();
    }
  }
  const double elapsed = SecondsSince(start);
  nlohmann::json summary = {
      {"role", "worker"},
      {"event", "summary"},
      {"stopped_by_signal", stop.load()},
      {"elapsed_s", elapsed},
      {"steps", all.size()},
      {"steps_per_s", elapsed > 0 ? static_cast<double>(all.size()) / elapsed : 0.0},
      {"busy_fraction", elapsed > 0 ? busy_s / elapsed : 0.0},
      {"gb_per_s_fp32_in", elapsed > 0 ? static_cast<double>(all.size()) * 4.0 *
                                             static_cast<double>(count) / elapsed * 1e-9
                                       : 0.0}};
  AddStats(all, "step_", summary);
  Emit(out, summary);
  return absl::OkStatus();
}

}  // namespace gift::bench
