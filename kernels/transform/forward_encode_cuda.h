// The forward transform fused with the push codec's encoding on the GPU:
// codes and block scales of T(G) written straight from G, without the FP32
// transformed tensor in global memory.
//
// How: TensorBasisCuda::ForwardLowRank runs the skinny GEMMs (they read G
// twice and produce the small rank-r terms L, R), then one kernel
// (forward_encode_kernels.cu) reads G tile by tile, applies both diagonal
// scalings and the rank-k update (k = r_in + r_out) per element, takes each
// scaling block's amax, scale and codes, and writes codes + scales.
//
// Memory traffic per element of a d_out x d_in tensor, FP32 input, 8-bit
// codes (block scales and the r-sized terms are below 1%):
//   unfused (Forward + EncodeCuda): 2 GEMM reads of G (8 B), the scaling
//     pass (read G, write out: 8 B), the rank-k GEMM (read + write out: 8 B),
//     the encode (read out, write codes: 5 B)                    = 29 B
//   fused: 2 GEMM reads of G (8 B), one read of G and one write of codes in
//     the fused kernel (5 B)                                     = 13 B
//   direct FP8 (EncodeCuda of G): read G, write codes            =  5 B
// The rank-k update costs 2k flops per element either way. Here it is an
// FP32 SIMT product (explicit FMAs in a fixed order, so that it is exact to
// reproduce; cuBLAS's may use tensor cores), which at k = 256 is ~500 flops
// per 5 bytes: on an H200 (~67 FP32 TFLOP/s, ~4.8 TB/s) that is compute-
// bound, above the bandwidth cost by an order of magnitude. Whether the
// fused path beats Forward + EncodeCuda is measured by `gift-bench
// transform` (bench/transform_bench_cuda.cc), not assumed.
//
// Not fused: the decode with the inverse. On paper the bytes drop too
// (decode 5 B + the inverse's 24 B = 29 B, against 7 B if both skinny GEMMs
// and the final pass read the 1-byte codes and decoded on the fly), but that
// needs two custom skinny GEMMs that decode their operand while loading it
// (cuBLAS only reads FP32 from memory) and the final pass has the same
// compute bound as above; not built (docs/design.md, "The GPU path").
//
// Exactness: Encode's codes and scales equal EncodeCuda applied to
// ForwardFixedOrder's output, bit for bit (the same per-element value, the
// codec's block rules), and equal the CPU codec's Encode of that output.
// ForwardFixedOrder differs from TensorBasisCuda::Forward only in the order
// of the rank-k sum (and its FMAs), so both agree with the CPU TensorBasis
// within transform_cuda.h's tolerances, not bit for bit.
//
// Codecs: block-scaled E4M3 or E5M2 (FP32 or E8M0 block scales, blocks of
// 32 or 128), nearest or stochastic rounding (Supports). NVFP4 and the
// per-tensor scaling need the amax of the whole transformed tensor before
// the first block can be encoded, i.e. the rank-k update twice; callers use
// Forward + EncodeCuda for them.
//
// Ownership and thread safety: the object references `basis` (not owned;
// must outlive it) and uses its stream and workspace, so calls on it are
// ordered with the basis's own calls and are not thread-safe; it owns one
// device word (the non-finite flag). Encode synchronizes the stream (it
// reports NaN/Inf input as a status, as EncodeCuda does); ForwardFixedOrder
// does not. C++17.
#ifndef GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_CUDA_H_
#define GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_CUDA_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "kernels/transform/transform_cuda.h"

namespace gift::kernels {

class ForwardEncoderCuda {
 public:
  // For `basis` (not owned, must outlive the object; a TensorBasisCuda
  // exists only where a device does). InvalidArgument for a null basis;
  // Internal when the flag word cannot be allocated.
  static absl::StatusOr<ForwardEncoderCuda> Create(TensorBasisCuda* basis);

  ForwardEncoderCuda(ForwardEncoderCuda&&) noexcept;
  ForwardEncoderCuda& operator=(ForwardEncoderCuda&&) noexcept;
  ~ForwardEncoderCuda();

  // True for the codecs Encode handles (see the file comment).
  static bool Supports(const codec::CodecSpec& spec);

  // out = encode(T(g)) for the d_out x d_in device tensor g; `out` holds
  // device buffers of the spec's layout. InvalidArgument for a shape other
  // than the basis's, a null buffer, a spec Supports refuses, or NaN/Inf in
  // T(g) (the output is then undefined); Internal for a CUDA or cuBLAS
  // error. Synchronizes the stream.
  absl::Status Encode(const float* g, int64_t d_out, int64_t d_in,
                      const codec::MutableEncodedView& out, const codec::RngKey& key);

  // out = T(g) in FP32 with Encode's per-element arithmetic (the unfused
  // reference of Encode; `out` must not overlap g). Errors as
  // TensorBasisCuda::Forward; enqueued, not waited for.
  absl::Status ForwardFixedOrder(const float* g, int64_t d_out, int64_t d_in, float* out);

 private:
  struct Impl;
  explicit ForwardEncoderCuda(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_TRANSFORM_FORWARD_ENCODE_CUDA_H_
