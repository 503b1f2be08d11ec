// The randomized Hadamard rotation of each row in blocks
// (transform::HadamardTransform, the rotation of transform::RotatedTransform)
// on the GPU, in place on a device buffer, with exactly the CPU's bits: the
// kernel (transform_kernels.cu) runs the reference's butterflies in double in
// the same order and rounds once, compiled without multiply-add contraction.
// tests/kernels/rotation_cuda_test.cc compares the two bit for bit (on a
// device, and over the host emulation).
//
// Asynchronous: Forward and Inverse enqueue on the object's stream and
// return without waiting; launch errors come back as Status, errors of the
// running work at the caller's next synchronization.
//
// Ownership and thread safety: the object owns its device copy of the signs;
// it does NOT own the stream given at creation, which must outlive it. Calls
// on one object are ordered by the stream; the buffer must not be written by
// other streams until the work is done.
#ifndef GIFT_KERNELS_TRANSFORM_ROTATION_CUDA_H_
#define GIFT_KERNELS_TRANSFORM_ROTATION_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/unique_handle.h"
#include "common/transform/hadamard_transform.h"

namespace gift::kernels {

class RowRotationCuda {
 public:
  // Uploads `rotation`'s signs (not referenced afterwards) for use on
  // `stream` (not owned; may be null, the legacy default stream).
  // FailedPrecondition without a CUDA device; InvalidArgument for a block
  // above the kernel's bound (at least transform::RotatedTransform::kMaxBlock);
  // Internal on a CUDA failure.
  static absl::StatusOr<RowRotationCuda> Create(const transform::HadamardTransform& rotation,
                                                cudaStream_t stream);

  // x = R(x) (Forward) or R^{-1}(x) (Inverse) for `rows` rows of d_in()
  // floats of device memory. InvalidArgument for a null buffer; Internal for
  // a launch error. Enqueued, not waited for.
  absl::Status Forward(float* x, int64_t rows) const { return Apply(x, rows, false); }
  absl::Status Inverse(float* x, int64_t rows) const { return Apply(x, rows, true); }

  int64_t d_in() const { return d_in_; }
  int64_t block() const { return block_; }

 private:
  RowRotationCuda(int64_t d_in, int64_t block, cudaStream_t stream)
      : d_in_(d_in), block_(block), stream_(stream) {}
  absl::Status Apply(float* x, int64_t rows, bool inverse) const;

  int64_t d_in_;
  int64_t block_;
  cudaStream_t stream_;
  UniqueHandle<void*, cudaFree> signs_;  // d_in floats, +1 or -1
};

}  // namespace gift::kernels

#endif  // GIFT_KERNELS_TRANSFORM_ROTATION_CUDA_H_
