// Internal interface between the CUDA codec's host API (codec_cuda.cc, which
// validates, converts errors to absl::Status and may use Abseil freely) and
// its kernels (codec_encode_kernels.cu and codec_decode_kernels.cu, compiled
// by nvcc, which include nothing but the CUDA runtime and
// common/codec/scalar.h).
//
// Callers have already validated the spec and computed the layout with
// codec::ComputeLayout; these functions trust every field they are given.
// All pointers are device memory except where noted.
//
// Thread safety: reentrant; concurrent calls on different streams are safe.
#ifndef GIFT_KERNELS_CODEC_CODEC_KERNELS_H_
#define GIFT_KERNELS_CODEC_CODEC_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gift::kernels::internal {

// Element formats as the kernels see them (NVFP4's elements are E2M1; kF32
// is the unscaled FP32 passthrough, whose codes are the FP32 bit patterns).
enum class ElementFormat : int { kE4M3, kE5M2, kE2M1, kBf16, kF32 };

// Scalings as the kernels see them; mirrors codec::Scaling.
enum class ScaleKind : int { kNone, kPerTensor, kPerBlockFp32, kPerBlockE8M0, kNvfp4 };

// The shape and byte layout of one encoded tensor (see codec::EncodedLayout).
struct KernelLayout {
  ElementFormat format = ElementFormat::kE4M3;
  ScaleKind scaling = ScaleKind::kNone;
  uint32_t block_size = 0;  // 16, 32 or 128 for block scalings, else unused
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t blocks_per_row = 0;
  uint64_t num_blocks = 0;
  uint64_t row_code_bytes = 0;
  float format_max = 0.0f;  // codec::FormatMax(format)
};

struct EncodeArgs {
  KernelLayout layout;
  const float* x = nullptr;   // rows * cols floats
  uint8_t* codes = nullptr;   // layout code bytes
  uint8_t* scales = nullptr;  // layout scale bytes (any alignment)
  bool stochastic = false;
  // scalar::MakePhiloxKey(key.tensor, key.rank) and key.step.
  uint32_t philox_k0 = 0;
  uint32_t philox_k1 = 0;
  uint64_t step = 0;
  bool fit_scales = false;  // NVFP4: codec::BlockScaleFit::kLeastSquares
};

struct DecodeArgs {
  KernelLayout layout;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  float* out = nullptr;
  bool accumulate = false;        // out = out + value instead of out = value
  bool apply_post_scale = false;  // then out = out * post_scale
  float post_scale = 1.0f;
};

// Enqueues the encoding on `stream` and returns without waiting. `check`
// (device memory, kEncodeCheckWords words, any prior contents) is zeroed on
// the stream first, then receives the non-finite check: check[0] the
// tensor's amax as |bits|, check[1] a flag; the input held NaN or Inf (and
// the output is then undefined) when check[0] >= 0x7F800000 or check[1] != 0.
// Returns the first CUDA error of the enqueueing, if any.
inline constexpr int kEncodeCheckWords = 2;
cudaError_t EnqueueEncode(const EncodeArgs& args, cudaStream_t stream, uint32_t* check);

// Enqueues the decoding on `stream` and returns without waiting.
cudaError_t EnqueueDecode(const DecodeArgs& args, cudaStream_t stream);

}  // namespace gift::kernels::internal

#endif  // GIFT_KERNELS_CODEC_CODEC_KERNELS_H_
