// Internal interface between the CUDA transform's host code
// (transform_cuda.cc and rotation_cuda.cc: validation, cuBLAS, absl::Status)
// and its custom kernels (transform_kernels.cu, compiled by nvcc, which
// includes nothing but the CUDA runtime).
//
// Callers have validated every argument; these functions trust them. All
// pointers are device memory.
//
// Thread safety: reentrant; concurrent calls on different streams are safe.
#ifndef GIFT_KERNELS_TRANSFORM_TRANSFORM_KERNELS_H_
#define GIFT_KERNELS_TRANSFORM_TRANSFORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gift::kernels::internal {

// out[i * cols + j] = (in[i * cols + j] * row_scale[i]) * col_scale[j] for a
// row-major rows x cols FP32 matrix, each product rounded to FP32 on its own
// (no contraction); a null scale vector stands for all ones (that factor is
// then skipped, which is the same value). `out` may equal `in`. Both sides'
// diagonal scalings of the transform in one pass over the tensor.
struct ScaleOuterArgs {
  const float* in = nullptr;
  float* out = nullptr;
  uint64_t rows = 0;
  uint64_t cols = 0;
  const float* row_scale = nullptr;  // rows values, or null
  const float* col_scale = nullptr;  // cols values, or null
};

// Enqueues the scaling on `stream` and returns without waiting; the first
// CUDA error of the launch, if any.
cudaError_t EnqueueScaleOuter(const ScaleOuterArgs& args, cudaStream_t stream);

// The randomized Hadamard rotation of each row in blocks, in place, with
// the bits of transform::HadamardTransform::RotateRows: per block of
// `block` elements (a power of two, at most kMaxRotateBlock), in double,
//   forward: x = in; x = H x (the fast Walsh-Hadamard butterflies, in the
//            reference's order); out = float((x * norm) * sign)
//   inverse: x = in * sign; x = H x; out = float(x * norm)
// with norm = 1 / sqrt(block) as the host computed it. One thread per
// block of a row.
inline constexpr uint64_t kMaxRotateBlock = 256;
struct RotateRowsArgs {
  float* x = nullptr;
  uint64_t rows = 0;
  uint64_t cols = 0;  // a multiple of block
  uint64_t block = 0;
  const float* signs = nullptr;  // cols values, each +1 or -1
  double norm = 0;
  bool inverse = false;
};

// Enqueues the rotation on `stream` and returns without waiting; the first
// CUDA error of the launch, if any.
cudaError_t EnqueueRotateRows(const RotateRowsArgs& args, cudaStream_t stream);

}  // namespace gift::kernels::internal

#endif  // GIFT_KERNELS_TRANSFORM_TRANSFORM_KERNELS_H_
