// The GPU part of `gift-bench transform`. Host code only (the kernels are in
// gift_transform_cuda and gift_codec_cuda); compiled when
// GIFT_BENCH_WITH_CUDA.
//
// Timing: CUDA events recorded on the bench's stream around each measured
// sequence. EncodeCuda and DecodeCuda synchronize their stream before they
// return (codec_cuda.h) and TensorBasisCuda does not, so a measured
// sequence includes the codec's synchronization: it is the time a caller
// waits, as in `gift-bench codec`.
#include "bench/transform_bench_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/cuda_bench_util.h"
#include "common/base/relative_error.h"
#include "common/base/status_macros.h"
#include "common/codec/encoded_tensor.h"
#include "kernels/codec/codec_cuda.h"
#include "kernels/transform/cublas_handle.h"
#include "kernels/transform/forward_encode_cuda.h"
#include "kernels/transform/transform_cuda.h"

namespace gift::bench {
namespace {

// The target for the GPU: GIFT's forward + encode within 1.5x of
// direct quantization.
constexpr double kFusedTarget = 1.5;

using kernels::CublasHandle;
using kernels::CublasStatus;

// Whether the fused path's codes and scales equal EncodeCuda of
// ForwardFixedOrder's output (forward_encode_cuda.h), on this shape.
absl::StatusOr<bool> FusedIsBitIdentical(kernels::ForwardEncoderCuda& fused, const float* g,
                                         int64_t m, int64_t n, float* work,
                                         const codec::MutableEncodedView& enc,
                                         const codec::EncodedLayout& layout,
                                         const codec::RngKey& key, cudaStream_t s) {
  std::vector<uint8_t> codes(layout.code_bytes), scales(layout.scale_bytes);
  std::vector<uint8_t> want_codes(layout.code_bytes), want_scales(layout.scale_bytes);
  auto download = [&](std::vector<uint8_t>& c, std::vector<uint8_t>& sc) -> absl::Status {
    GIFT_BENCH_CUDA(
        cudaMemcpyAsync(c.data(), enc.codes, c.size(), cudaMemcpyDeviceToHost, s));
    GIFT_BENCH_CUDA(
        cudaMemcpyAsync(sc.data(), enc.scales, sc.size(), cudaMemcpyDeviceToHost, s));
    GIFT_BENCH_CUDA(cudaStreamSynchronize(s));
    return absl::OkStatus();
  };
  GIFT_RETURN_IF_ERROR(fused.Encode(g, m, n, enc, key));
  GIFT_RETURN_IF_ERROR(download(codes, scales));
  GIFT_RETURN_IF_ERROR(fused.ForwardFixedOrder(g, m, n, work));
  GIFT_RETURN_IF_ERROR(kernels::EncodeCuda(work, enc, key, s));
  GIFT_RETURN_IF_ERROR(download(want_codes, want_scales));
  return codes == want_codes && scales == want_scales;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunGpuTransformShape(const GpuTransformShapeConfig& config,
                                                    std::ostream& os) {
  if (config.basis == nullptr || config.input == nullptr || config.cpu_forward == nullptr) {
    return absl::InvalidArgumentError("GPU transform bench: missing basis or data");
  }
  const int64_t m = config.basis->header().d_out, n = config.basis->header().d_in;
  const size_t count = static_cast<size_t>(m * n);
  if (config.input->size() != count || config.cpu_forward->size() != count) {
    return absl::InvalidArgumentError("GPU transform bench: data does not match the basis");
  }
  const codec::RngKey key{.tensor = 1, .step = 0, .rank = 0};
  Stream stream;
  GIFT_RETURN_IF_ERROR(stream.Init());
  const cudaStream_t s = stream.get();
  EventPair ev;
  GIFT_RETURN_IF_ERROR(ev.Init());
  CublasHandle cublas;
  GIFT_RETURN_IF_ERROR(cublas.Init(s));

  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_g, DeviceBuffer::Upload(*config.input));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_work, DeviceBuffer::Allocate(count * sizeof(float)));
  GIFT_ASSIGN_OR_RETURN(const codec::EncodedLayout layout, codec::ComputeLayout(config.spec, m, n));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_codes, DeviceBuffer::Allocate(layout.code_bytes));
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_scales, DeviceBuffer::Allocate(layout.scale_bytes));
  const codec::MutableEncodedView enc{config.spec, static_cast<uint64_t>(m),
                                      static_cast<uint64_t>(n), d_codes.bytes(), d_scales.bytes()};
  // The dense form's operator: any d_in x d_in matrix costs the same.
  std::vector<float> dense_host(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) dense_host[i * n + i] = 1.0f;
  for (size_t i = 0; i < dense_host.size(); i += 7) dense_host[i] += 1e-3f;
  GIFT_ASSIGN_OR_RETURN(DeviceBuffer d_dense, DeviceBuffer::Upload(dense_host));

  GIFT_ASSIGN_OR_RETURN(kernels::TensorBasisCuda fp32,
                        kernels::TensorBasisCuda::Create(*config.basis, s));
  GIFT_ASSIGN_OR_RETURN(
      kernels::TensorBasisCuda tf32,
      kernels::TensorBasisCuda::Create(*config.basis, s, kernels::TransformMath::kTf32));

  // The fused forward + encode (forward_encode_cuda.h), where the codec allows it.
  const bool fusable = kernels::ForwardEncoderCuda::Supports(config.spec);
  std::optional<kernels::ForwardEncoderCuda> fused_fp32, fused_tf32;
  if (fusable) {
    GIFT_ASSIGN_OR_RETURN(fused_fp32, kernels::ForwardEncoderCuda::Create(&fp32));
    GIFT_ASSIGN_OR_RETURN(fused_tf32, kernels::ForwardEncoderCuda::Create(&tf32));
  }

  // Accuracy of one forward each against the CPU's double-precision result.
  nlohmann::json doc;
  doc["ran"] = true;
  if (fusable) {
    GIFT_RETURN_IF_ERROR(fused_fp32->ForwardFixedOrder(d_g.floats(), m, n, d_work.floats()));
    std::vector<float> got(count);
    GIFT_BENCH_CUDA(cudaMemcpyAsync(got.data(), d_work.floats(), count * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
    GIFT_BENCH_CUDA(cudaStreamSynchronize(s));
    doc["forward_rel_error_fixed_order"] = RelativeL2(got, *config.cpu_forward);
    GIFT_ASSIGN_OR_RETURN(const bool identical,
                          FusedIsBitIdentical(*fused_fp32, d_g.floats(), m, n, d_work.floats(),
                                              enc, layout, key, s));
    doc["fused_bit_identical"] = identical;
  }
  for (auto* gpu : {&fp32, &tf32}) {
    GIFT_RETURN_IF_ERROR(gpu->Forward(d_g.floats(), m, n, d_work.floats()));
    std::vector<float> got(count);
    GIFT_BENCH_CUDA(cudaMemcpyAsync(got.data(), d_work.floats(), count * sizeof(float),
                                    cudaMemcpyDeviceToHost, s));
    GIFT_BENCH_CUDA(cudaStreamSynchronize(s));
    doc[gpu == &fp32 ? "forward_rel_error_fp32" : "forward_rel_error_tf32"] =
        RelativeL2(got, *config.cpu_forward);
  }

  const int reps = config.reps;
  auto encode = [&](const float* x) { return kernels::EncodeCuda(x, enc, key, s); };
  auto decode = [&] { return kernels::DecodeCuda(enc, d_work.floats(), false, s); };
  struct Row {
    const char* name;
    std::function<absl::Status()> fn;
  };
  std::vector<Row> rows = {
      {"D2D copy",
       [&] {
         return CudaStatus(cudaMemcpyAsync(d_work.floats(), d_g.floats(), count * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s),
                           "cudaMemcpyAsync");
       }},
      {"encode (direct)", [&] { return encode(d_g.floats()); }},
      {"forward fp32", [&] { return fp32.Forward(d_g.floats(), m, n, d_work.floats()); }},
      {"forward fp32 + encode",
       [&] {
         GIFT_RETURN_IF_ERROR(fp32.Forward(d_g.floats(), m, n, d_work.floats()));
         return encode(d_work.floats());
       }},
      {"forward tf32 + encode",
       [&] {
         GIFT_RETURN_IF_ERROR(tf32.Forward(d_g.floats(), m, n, d_work.floats()));
         return encode(d_work.floats());
       }},
      {"decode (direct)", decode},
      {"decode + inverse fp32",
       [&] {
         GIFT_RETURN_IF_ERROR(decode());
         return fp32.Inverse(d_work.floats(), m, n, d_work.floats());
       }},
      {"decode + inverse tf32",
       [&] {
         GIFT_RETURN_IF_ERROR(decode());
         return tf32.Inverse(d_work.floats(), m, n, d_work.floats());
       }},
      {"dense sgemm + encode",
       [&] {
         // Row-major out = G M is column-major out^T = M^T G^T.
         const float one = 1.0f, zero = 0.0f;
         GIFT_RETURN_IF_ERROR(CublasStatus(
             cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                         static_cast<int>(m), static_cast<int>(n), &one, d_dense.floats(),
                         static_cast<int>(n), d_g.floats(), static_cast<int>(n), &zero,
                         d_work.floats(), static_cast<int>(n)),
             "cublasSgemm"));
         return encode(d_work.floats());
       }},
  };
  if (fusable) {
    rows.push_back({"fixed-order fwd + encode", [&] {
                      GIFT_RETURN_IF_ERROR(
                          fused_fp32->ForwardFixedOrder(d_g.floats(), m, n, d_work.floats()));
                      return encode(d_work.floats());
                    }});
    rows.push_back({"fused fwd+encode fp32",
                    [&] { return fused_fp32->Encode(d_g.floats(), m, n, enc, key); }});
    rows.push_back({"fused fwd+encode tf32",
                    [&] { return fused_tf32->Encode(d_g.floats(), m, n, enc, key); }});
  }
  os << absl::StrFormat("%-10s %-26s %11s %9s %9s\n", "GPU", "operation", "ms", "x direct",
                        "x D2D");
  doc["ops"] = nlohmann::json::array();
  double encode_s = 0, decode_s = 0, copy_s = 0;
  for (const Row& row : rows) {
    GIFT_ASSIGN_OR_RETURN(const Timing t, TimeOnDevice(reps, s, ev, row.fn));
    const std::string name = row.name;
    if (name == "D2D copy") copy_s = t.median_s;
    if (name == "encode (direct)") encode_s = t.median_s;
    if (name == "decode (direct)") decode_s = t.median_s;
    const double base = name.rfind("decode", 0) == 0 ? decode_s : encode_s;
    const double ratio = base > 0 ? t.median_s / base : 0.0;
    const double over_copy = copy_s > 0 ? t.median_s / copy_s : 0.0;
    WriteLine(os, absl::StrFormat("%-10s %-26s %11.4f %8.2fx %8.2fx", "", name, t.median_s * 1e3,
                                  ratio, over_copy));
    os.flush();
    doc["ops"].push_back({{"op", name},
                          {"median_s", t.median_s},
                          {"samples_s", t.seconds},
                          {"x_direct", ratio},
                          {"x_copy", over_copy}});
    if (name == "forward fp32 + encode") doc["forward_encode_over_encode_fp32"] = ratio;
    if (name == "forward tf32 + encode") doc["forward_encode_over_encode_tf32"] = ratio;
    if (name == "fused fwd+encode fp32") doc["fused_over_encode_fp32"] = ratio;
    if (name == "fused fwd+encode tf32") doc["fused_over_encode_tf32"] = ratio;
  }
  if (fusable) {
    const double f32 = doc["fused_over_encode_fp32"].get<double>();
    const double t32 = doc["fused_over_encode_tf32"].get<double>();
    os << absl::StrFormat(
        "target (GPU): fused forward + encode <= %.1fx encode: FP32 GEMMs %.2fx %s, TF32 GEMMs "
        "%.2fx %s; fused codes %s the unfused fixed-order path's\n",
        kFusedTarget, f32, f32 <= kFusedTarget ? "PASS" : "MISS", t32,
        t32 <= kFusedTarget ? "PASS" : "MISS",
        doc["fused_bit_identical"].get<bool>() ? "bit-identical to" : "DIFFER from");
  } else {
    os << "fused forward + encode: not run (codec " << codec::ToString(config.spec)
       << " is not fused)\n";
  }
  os << absl::StrFormat("GPU forward vs CPU TensorBasis: relative error %.2e (fp32), %.2e (tf32)",
                        doc["forward_rel_error_fp32"].get<double>(),
                        doc["forward_rel_error_tf32"].get<double>());
  if (fusable) {
    os << absl::StrFormat(", %.2e (fixed order, the fused path's)",
                          doc["forward_rel_error_fixed_order"].get<double>());
  }
  os << '\n';
  return doc;
}

}  // namespace gift::bench
