// The GPU part of `gift-bench transform` (transform_bench.h), for one shape:
// timed with CUDA events on one stream, median of `reps` runs after a
// warm-up:
//   D2D copy of the FP32 tensor                      (bandwidth baseline)
//   EncodeCuda(G)                                    (direct quantize)
//   TensorBasisCuda::Forward + EncodeCuda            (FP32 and TF32 GEMMs)
//   TensorBasisCuda::Forward alone
//   DecodeCuda, and DecodeCuda + TensorBasisCuda::Inverse
//   dense SGEMM G M (M: d_in x d_in) + EncodeCuda    (the published dense form's floor)
//   ForwardEncoderCuda::ForwardFixedOrder + EncodeCuda (unfused, the fused path's arithmetic)
//   ForwardEncoderCuda::Encode, FP32 and TF32 GEMMs   (fused; block-scaled 8-bit codecs only)
// each as a ratio to the direct encode (decode rows: to the direct decode)
// and to the D2D copy, the GPU forwards' relative errors against the CPU
// TensorBasis, and whether the fused codes and scales equal the unfused
// fixed-order path's bit for bit on this shape.
//
// Only compiled into gift-bench when CUDA is on (GIFT_BENCH_WITH_CUDA). This
// header needs no CUDA headers, so the CPU code can include it either way.
#ifndef GIFT_BENCH_TRANSFORM_BENCH_CUDA_H_
#define GIFT_BENCH_TRANSFORM_BENCH_CUDA_H_

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"
#include "common/transform/tensor_basis.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct GpuTransformShapeConfig {
  codec::CodecSpec spec;
  const transform::TensorBasis* basis = nullptr;    // d_out x d_in
  const std::vector<float>* input = nullptr;        // d_out * d_in host floats
  const std::vector<float>* cpu_forward = nullptr;  // basis->Forward(input), for the error
  int reps = 3;
};

// Runs the GPU measurements of one shape, printing table lines to `table`,
// and returns the numbers as JSON. Errors (no memory, a failed call) are
// returned as such.
absl::StatusOr<nlohmann::json> RunGpuTransformShape(const GpuTransformShapeConfig& config,
                                                    std::ostream& table);

}  // namespace gift::bench

#endif  // GIFT_BENCH_TRANSFORM_BENCH_CUDA_H_
