#include "kernels/transform/rotation_cuda.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/rotated_transform.h"
#include "kernels/cuda_status.h"
#include "kernels/transform/transform_kernels.h"

namespace gift::kernels {

static_assert(internal::kMaxRotateBlock >= transform::RotatedTransform::kMaxBlock,
              "the kernel must rotate every block a RotatedTransform may have");

absl::StatusOr<RowRotationCuda> RowRotationCuda::Create(
    const transform::HadamardTransform& rotation, cudaStream_t stream) {
  if (!CudaDeviceAvailable()) return absl::FailedPreconditionError("no CUDA device is available");
  if (rotation.block() > static_cast<int64_t>(internal::kMaxRotateBlock)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotation block ", rotation.block(), " is above the device's ", internal::kMaxRotateBlock));
  }
  RowRotationCuda r(rotation.d_in(), rotation.block(), stream);
  std::vector<float> signs(rotation.signs().begin(), rotation.signs().end());
  const size_t bytes = sizeof(float) * signs.size();
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(r.signs_.put(), bytes), "cudaMalloc (signs)"));
  // Synchronous: `signs` is pageable and goes out of scope.
  GIFT_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(r.signs_.get(), signs.data(), bytes, cudaMemcpyHostToDevice), "copy of signs"));
  return r;
}

absl::Status RowRotationCuda::Apply(float* x, int64_t rows, bool inverse) const {
  if (x == nullptr) return absl::InvalidArgumentError("null buffer to rotate");
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("negative row count ", rows));
  const internal::RotateRowsArgs args{.x = x,
                                      .rows = static_cast<uint64_t>(rows),
                                      .cols = static_cast<uint64_t>(d_in_),
                                      .block = static_cast<uint64_t>(block_),
                                      .signs = static_cast<const float*>(signs_.get()),
                                      // As the CPU computes it (HadamardTransform::RotateRows).
                                      .norm = 1.0 / std::sqrt(static_cast<double>(block_)),
                                      .inverse = inverse};
  return CudaStatus(internal::EnqueueRotateRows(args, stream_), "rotation kernel");
}

}  // namespace gift::kernels
