// Host side of the CUDA codec: device detection, validation against the CPU
// codec's rules (codec::ComputeLayout), status conversion, and the order of
// kernel launches. The kernels are in codec_encode_kernels.cu and codec_decode_kernels.cu.
#include "kernels/codec/codec_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/codec/scalar.h"
#include "kernels/codec/codec_kernels.h"
#include "kernels/cuda_status.h"

namespace gift::kernels {
namespace {

using codec::CodecSpec;
using codec::EncodedLayout;

absl::Status NoDevice(const char* fn) {
  return absl::FailedPreconditionError(absl::StrCat(fn, ": no CUDA device is available"));
}

internal::KernelLayout ToKernelLayout(const CodecSpec& spec, const EncodedLayout& l) {
  internal::KernelLayout k;
  switch (spec.format) {
    case codec::Format::kE4M3:
      k.format = internal::ElementFormat::kE4M3;
      break;
    case codec::Format::kE5M2:
      k.format = internal::ElementFormat::kE5M2;
      break;
    case codec::Format::kNvfp4:
      k.format = internal::ElementFormat::kE2M1;
      break;
    case codec::Format::kBf16:
      k.format = internal::ElementFormat::kBf16;
      break;
    case codec::Format::kF32:
      k.format = internal::ElementFormat::kF32;
      break;
  }
  switch (spec.scaling) {
    case codec::Scaling::kNone:
      k.scaling = internal::ScaleKind::kNone;
      break;
    case codec::Scaling::kPerTensor:
      k.scaling = internal::ScaleKind::kPerTensor;
      break;
    case codec::Scaling::kPerBlockFp32:
      k.scaling = internal::ScaleKind::kPerBlockFp32;
      break;
    case codec::Scaling::kPerBlockE8M0:
      k.scaling = internal::ScaleKind::kPerBlockE8M0;
      break;
    case codec::Scaling::kNvfp4:
      k.scaling = internal::ScaleKind::kNvfp4;
      break;
  }
  k.block_size = spec.block_size;
  k.rows = l.rows;
  k.cols = l.cols;
  k.blocks_per_row = l.blocks_per_row;
  k.num_blocks = l.num_blocks;
  k.row_code_bytes = l.row_code_bytes;
  k.format_max = codec::FormatMax(spec.format);
  return k;
}

// Like the CPU codec: buffers may be null only for an empty tensor (which is
// then left untouched, scales included).
absl::Status CheckBuffers(const char* fn, absl::string_view what, const EncodedLayout& l,
                          const void* codes, const void* scales) {
  if (l.num_elements == 0) return absl::OkStatus();
  if (codes == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", what, " has no code buffer"));
  }
  if (l.scale_bytes > 0 && scales == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", what, " has no scale buffer"));
  }
  return absl::OkStatus();
}

absl::Status CheckFloats(const char* fn, absl::string_view what, const EncodedLayout& l,
                         const float* p) {
  if (l.num_elements > 0 && p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", what, " is null"));
  }
  return absl::OkStatus();
}

static_assert(sizeof(EncodeCheck) == internal::kEncodeCheckWords * sizeof(uint32_t));

absl::Status NonFiniteStatus(const char* fn, const EncodeCheck& check, uint64_t rows,
                             uint64_t cols) {
  if (check.words[0] >= codec::scalar::kInfBits || check.words[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": the input holds NaN or Inf (", rows, " x ", cols, " tensor)"));
  }
  return absl::OkStatus();
}

// Enqueues the encoding with an already computed layout, its check into
// `check` (device memory); waits for nothing.
absl::Status EnqueueWithLayout(const char* fn, const float* x, const codec::MutableEncodedView& out,
                               const EncodedLayout& layout, const codec::RngKey& key,
                               cudaStream_t stream, EncodeCheck* check) {
  internal::EncodeArgs args;
  args.layout = ToKernelLayout(out.spec, layout);
  args.x = x;
  args.codes = out.codes;
  args.scales = out.scales;
  args.stochastic = out.spec.rounding == codec::Rounding::kStochastic;
  args.fit_scales = out.spec.block_scale_fit == codec::BlockScaleFit::kLeastSquares;
  const codec::scalar::PhiloxKey philox = codec::scalar::MakePhiloxKey(key.tensor, key.rank);
  args.philox_k0 = philox.k0;
  args.philox_k1 = philox.k1;
  args.step = key.step;
  return CudaStatus(internal::EnqueueEncode(args, stream, check->words), fn);
}

// Stream-ordered scratch (cudaMallocAsync), with a plain cudaMalloc fallback
// for devices without memory pools. Freed on every path.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() { (void)Release(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  cudaError_t Allocate(size_t bytes) {
    cudaError_t e = cudaMallocAsync(&ptr_, bytes, stream_);
    if (e == cudaSuccess) {
      async_ = true;
      return e;
    }
    ptr_ = nullptr;
    if (e != cudaErrorNotSupported) return e;
    (void)cudaGetLastError();  // clear the non-sticky error
    async_ = false;
    return cudaMalloc(&ptr_, bytes);
  }

  // Stream-ordered free (or synchronize + free for the fallback).
  cudaError_t Release() {
    if (ptr_ == nullptr) return cudaSuccess;
    void* p = ptr_;
    ptr_ = nullptr;
    if (async_) return cudaFreeAsync(p, stream_);
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    const cudaError_t freed = cudaFree(p);
    return sync != cudaSuccess ? sync : freed;
  }

  EncodeCheck* check() const { return static_cast<EncodeCheck*>(ptr_); }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
  bool async_ = false;
};

// The synchronous encode: the asynchronous one into stream-ordered scratch,
// the check copied back, the stream synchronized.
absl::Status EncodeWithLayout(const char* fn, const float* x, const codec::MutableEncodedView& out,
                              const EncodedLayout& layout, const codec::RngKey& key,
                              cudaStream_t stream) {
  // The CPU codec writes nothing for an empty tensor, not even its scales.
  if (layout.num_elements == 0) return absl::OkStatus();
  Scratch scratch(stream);
  GIFT_RETURN_IF_ERROR(CudaStatus(scratch.Allocate(sizeof(EncodeCheck)), fn));
  GIFT_RETURN_IF_ERROR(EnqueueWithLayout(fn, x, out, layout, key, stream, scratch.check()));
  EncodeCheck check;
  GIFT_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(&check, scratch.check(), sizeof(check), cudaMemcpyDeviceToHost, stream), fn));
  GIFT_RETURN_IF_ERROR(CudaStatus(scratch.Release(), fn));
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), fn));
  return NonFiniteStatus(fn, check, layout.rows, layout.cols);
}

internal::DecodeArgs MakeDecodeArgs(const codec::EncodedView& in, const EncodedLayout& layout,
                                    float* out, bool accumulate) {
  internal::DecodeArgs args;
  args.layout = ToKernelLayout(in.spec, layout);
  args.codes = in.codes;
  args.scales = in.scales;
  args.out = out;
  args.accumulate = accumulate;
  return args;
}

// The checks EncodeCuda and EncodeCudaAsync make before any work.
absl::StatusOr<EncodedLayout> CheckEncode(const char* fn, const float* x,
                                          const codec::MutableEncodedView& out) {
  if (!CudaDeviceAvailable()) return NoDevice(fn);
  GIFT_ASSIGN_OR_RETURN(const EncodedLayout layout,
                        codec::ComputeLayout(out.spec, out.rows, out.cols));
  GIFT_RETURN_IF_ERROR(CheckFloats(fn, "the input", layout, x));
  GIFT_RETURN_IF_ERROR(CheckBuffers(fn, "the output", layout, out.codes, out.scales));
  return layout;
}

// The checks DecodeCuda and DecodeCudaAsync make, then the enqueueing.
absl::Status EnqueueDecode(const char* fn, const codec::EncodedView& in, float* out,
                           bool accumulate, cudaStream_t stream) {
  if (!CudaDeviceAvailable()) return NoDevice(fn);
  GIFT_ASSIGN_OR_RETURN(const EncodedLayout layout,
                        codec::ComputeLayout(in.spec, in.rows, in.cols));
  GIFT_RETURN_IF_ERROR(CheckBuffers(fn, "the input", layout, in.codes, in.scales));
  GIFT_RETURN_IF_ERROR(CheckFloats(fn, "the output", layout, out));
  if (layout.num_elements == 0) return absl::OkStatus();
  return CudaStatus(internal::EnqueueDecode(MakeDecodeArgs(in, layout, out, accumulate), stream),
                    fn);
}

}  // namespace

absl::Status EncodeCuda(const float* x, const codec::MutableEncodedView& out,
                        const codec::RngKey& key, cudaStream_t stream) {
  constexpr const char* kFn = "EncodeCuda";
  GIFT_ASSIGN_OR_RETURN(const EncodedLayout layout, CheckEncode(kFn, x, out));
  return EncodeWithLayout(kFn, x, out, layout, key, stream);
}

absl::Status EncodeCudaAsync(const float* x, const codec::MutableEncodedView& out,
                             const codec::RngKey& key, cudaStream_t stream, EncodeCheck* check) {
  // Named as EncodeCuda, so that its errors read the same to the caller.
  constexpr const char* kFn = "EncodeCuda";
  GIFT_ASSIGN_OR_RETURN(const EncodedLayout layout, CheckEncode(kFn, x, out));
  if (check == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": no check buffer"));
  }
  return EnqueueWithLayout(kFn, x, out, layout, key, stream, check);
}

absl::Status EncodeCheckStatus(const EncodeCheck& check, uint64_t rows, uint64_t cols) {
  return NonFiniteStatus("EncodeCuda", check, rows, cols);
}

absl::Status DecodeCuda(const codec::EncodedView& in, float* out, bool accumulate,
                        cudaStream_t stream) {
  constexpr const char* kFn = "DecodeCuda";
  GIFT_RETURN_IF_ERROR(EnqueueDecode(kFn, in, out, accumulate, stream));
  return CudaStatus(cudaStreamSynchronize(stream), kFn);
}

absl::Status DecodeCudaAsync(const codec::EncodedView& in, float* out, bool accumulate,
                             cudaStream_t stream) {
  return EnqueueDecode("DecodeCuda", in, out, accumulate, stream);
}

absl::Status ReduceCuda(absl::Span<const codec::EncodedView> inputs, float* sum, float post_scale,
                        const codec::MutableEncodedView& out, const codec::RngKey& key,
                        cudaStream_t stream) {
  constexpr const char* kFn = "ReduceCuda";
  if (!CudaDeviceAvailable()) return NoDevice(kFn);
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": no inputs to reduce"));
  }
  const uint64_t rows = inputs[0].rows;
  const uint64_t cols = inputs[0].cols;
  std::vector<EncodedLayout> layouts;
  layouts.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const codec::EncodedView& in = inputs[k];
    if (in.rows != rows || in.cols != cols) {
      return absl::InvalidArgumentError(absl::StrCat(kFn, ": input ", k, " is ", in.rows, " x ",
                                                     in.cols, ", input 0 is ", rows, " x ", cols));
    }
    GIFT_ASSIGN_OR_RETURN(EncodedLayout layout, codec::ComputeLayout(in.spec, in.rows, in.cols));
    GIFT_RETURN_IF_ERROR(CheckBuffers(kFn, absl::StrCat("input ", k), layout, in.codes, in.scales));
    layouts.push_back(layout);
  }
  GIFT_RETURN_IF_ERROR(CheckFloats(kFn, "the sum", layouts[0], sum));
  const bool encode = out.codes != nullptr;
  EncodedLayout out_layout;
  if (encode) {
    if (out.rows != rows || out.cols != cols) {
      return absl::InvalidArgumentError(absl::StrCat(kFn, ": the output is ", out.rows, " x ",
                                                     out.cols, ", the inputs are ", rows, " x ",
                                                     cols));
    }
    GIFT_ASSIGN_OR_RETURN(out_layout, codec::ComputeLayout(out.spec, out.rows, out.cols));
    GIFT_RETURN_IF_ERROR(CheckBuffers(kFn, "the output", out_layout, out.codes, out.scales));
  }

  // sum = in_0; sum = sum + in_k for k = 1..N-1; the post-scale multiply
  // (skipped when it is 1) is fused into the last pass as its own rounding.
  const bool scale = post_scale != 1.0f;
  for (size_t k = 0; k < inputs.size() && layouts[0].num_elements > 0; ++k) {
    internal::DecodeArgs args = MakeDecodeArgs(inputs[k], layouts[k], sum, /*accumulate=*/k > 0);
    if (k + 1 == inputs.size() && scale) {
      args.apply_post_scale = true;
      args.post_scale = post_scale;
    }
    if (cudaError_t err = internal::EnqueueDecode(args, stream); err != cudaSuccess) {
      return CudaStatus(err, kFn);
    }
  }
  if (encode) return EncodeWithLayout(kFn, sum, out, out_layout, key, stream);
  if (cudaError_t err = cudaStreamSynchronize(stream); err != cudaSuccess) {
    return CudaStatus(err, kFn);
  }
  return absl::OkStatus();
}

}  // namespace gift::kernels
