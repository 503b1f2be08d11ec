// Host side of the fused forward transform + encode (forward_encode_cuda.h):
// validation against the codec's layout rules, the flag word, and the order
// of ForwardLowRank, the fused kernel and the read-back.
#include "kernels/transform/forward_encode_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/scalar.h"
#include "kernels/codec/codec_kernels.h"
#include "kernels/cuda_status.h"
#include "kernels/transform/forward_encode_kernels.h"

namespace gift::kernels {
namespace {

internal::FusedForwardArgs TermsArgs(const float* g, int64_t d_out, int64_t d_in,
                                     const TensorBasisCuda::LowRankTerms& t) {
  internal::FusedForwardArgs a;
  a.g = g;
  a.rows = static_cast<uint64_t>(d_out);
  a.cols = static_cast<uint64_t>(d_in);
  a.row_scale = t.s_out;
  a.col_scale = t.s_in;
  a.left = t.left;
  a.right = t.right;
  a.k = static_cast<uint32_t>(t.k);
  return a;
}

}  // namespace

struct ForwardEncoderCuda::Impl {
  TensorBasisCuda* basis = nullptr;
  uint32_t* flag = nullptr;  // device word

  ~Impl() {
    if (flag != nullptr) cudaFree(flag);
  }
};

absl::StatusOr<ForwardEncoderCuda> ForwardEncoderCuda::Create(TensorBasisCuda* basis) {
  if (basis == nullptr) {
    return absl::InvalidArgumentError("ForwardEncoderCuda::Create: null basis");
  }
  auto impl = std::make_unique<Impl>();
  impl->basis = basis;
  void* flag = nullptr;
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&flag, sizeof(uint32_t)), "cudaMalloc"));
  impl->flag = static_cast<uint32_t*>(flag);
  return ForwardEncoderCuda(std::move(impl));
}

ForwardEncoderCuda::ForwardEncoderCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ForwardEncoderCuda::ForwardEncoderCuda(ForwardEncoderCuda&&) noexcept = default;
ForwardEncoderCuda& ForwardEncoderCuda::operator=(ForwardEncoderCuda&&) noexcept = default;
ForwardEncoderCuda::~ForwardEncoderCuda() = default;

bool ForwardEncoderCuda::Supports(const codec::CodecSpec& spec) {
  const bool format = spec.format == codec::Format::kE4M3 || spec.format == codec::Format::kE5M2;
  const bool scaling = spec.scaling == codec::Scaling::kPerBlockFp32 ||
                       spec.scaling == codec::Scaling::kPerBlockE8M0;
  return format && scaling && (spec.block_size == 32 || spec.block_size == 128) &&
         codec::Validate(spec).ok();
}

absl::Status ForwardEncoderCuda::ForwardFixedOrder(const float* g, int64_t d_out, int64_t d_in,
                                                   float* out) {
  constexpr const char* kFn = "ForwardEncoderCuda::ForwardFixedOrder";
  if (out == nullptr) return absl::InvalidArgumentError(absl::StrCat(kFn, ": null buffer"));
  GIFT_ASSIGN_OR_RETURN(const TensorBasisCuda::LowRankTerms terms,
                        impl_->basis->ForwardLowRank(g, d_out, d_in));
  internal::FusedForwardArgs a = TermsArgs(g, d_out, d_in, terms);
  a.out = out;
  return CudaStatus(internal::EnqueueFusedForward(a, impl_->basis->stream()), kFn);
}

absl::Status ForwardEncoderCuda::Encode(const float* g, int64_t d_out, int64_t d_in,
                                        const codec::MutableEncodedView& out,
                                        const codec::RngKey& key) {
  constexpr const char* kFn = "ForwardEncoderCuda::Encode";
  if (!Supports(out.spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFn, ": codec ", codec::ToString(out.spec),
                     " is not fused (block-scaled e4m3/e5m2 with blocks of 32 or 128 only); use "
                     "TensorBasisCuda::Forward + EncodeCuda"));
  }
  if (out.rows != static_cast<uint64_t>(d_out) || out.cols != static_cast<uint64_t>(d_in)) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": output of shape ", out.rows, "x",
                                                   out.cols, " for a ", d_out, "x", d_in,
                                                   " tensor"));
  }
  GIFT_ASSIGN_OR_RETURN(const codec::EncodedLayout layout,
                        codec::ComputeLayout(out.spec, out.rows, out.cols));
  if (layout.num_elements > 0 && (out.codes == nullptr || out.scales == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": the output has a null buffer"));
  }
  const cudaStream_t stream = impl_->basis->stream();
  GIFT_ASSIGN_OR_RETURN(const TensorBasisCuda::LowRankTerms terms,
                        impl_->basis->ForwardLowRank(g, d_out, d_in));
  internal::FusedForwardArgs a = TermsArgs(g, d_out, d_in, terms);
  internal::KernelLayout& l = a.layout;
  l.format = out.spec.format == codec::Format::kE5M2 ? internal::ElementFormat::kE5M2
                                                     : internal::ElementFormat::kE4M3;
  l.scaling = out.spec.scaling == codec::Scaling::kPerBlockE8M0
                  ? internal::ScaleKind::kPerBlockE8M0
                  : internal::ScaleKind::kPerBlockFp32;
  l.block_size = out.spec.block_size;
  l.rows = layout.rows;
  l.cols = layout.cols;
  l.blocks_per_row = layout.blocks_per_row;
  l.num_blocks = layout.num_blocks;
  l.row_code_bytes = layout.row_code_bytes;
  l.format_max = codec::FormatMax(out.spec.format);
  a.codes = out.codes;
  a.scales = out.scales;
  a.stochastic = out.spec.rounding == codec::Rounding::kStochastic;
  const codec::scalar::PhiloxKey philox = codec::scalar::MakePhiloxKey(key.tensor, key.rank);
  a.philox_k0 = philox.k0;
  a.philox_k1 = philox.k1;
  a.step = key.step;
  a.non_finite = impl_->flag;
  GIFT_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(impl_->flag, 0, sizeof(uint32_t), stream), "cudaMemsetAsync"));
  GIFT_RETURN_IF_ERROR(CudaStatus(internal::EnqueueFusedForward(a, stream), kFn));
  uint32_t non_finite = 0;
  GIFT_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(&non_finite, impl_->flag, sizeof(non_finite), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync"));
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  if (non_finite != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFn, ": the transformed tensor holds NaN or Inf (", d_out, " x ", d_in, " tensor)"));
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
