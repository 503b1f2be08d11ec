// One tensor the training process registered: its range of a buffer it
// handed over (buffer_socket.h), in the buffer's dtype, and the FP32 span
// the engine works on. FP32: the span is the buffer itself (zero copy).
// BF16 / FP16: the span is the tensor's own FP32 staging, which Widen fills
// from the buffer (exact) and Narrow rounds back into it (nearest even,
// dtype_conversion.h), one pass each.
//
// Ownership: shares the handed buffer's mapping (kept mapped while any
// registered tensor views it); owns the staging. Thread safety: View is
// pure; Widen / Narrow write the staging / the buffer and must not run
// concurrently on one tensor (the daemon runs them under its step lock).
#ifndef GIFT_WORKER_REGISTERED_TENSOR_H_
#define GIFT_WORKER_REGISTERED_TENSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gift/v1/worker.pb.h"
#include "worker/buffer_socket.h"
#include "worker/shared_buffer.h"
#include "worker/step_planner.h"

namespace gift::worker {

struct RegisteredTensor {
  // Checks `spec` (name, shape, dtype, sizes, location) and views its range
  // of the buffer `buffers` handed over (nullptr: the worker has no buffer
  // socket). Errors name `what`: InvalidArgument (bad spec, misaligned
  // offset, a shm_name buffer, which is refused), Unimplemented (CUDA IPC),
  // FailedPrecondition (no buffer socket), NotFound (unknown handle),
  // OutOfRange (a range past the buffer). tensor_id is left 0.
  static absl::StatusOr<RegisteredTensor> View(const gift::v1::BufferSpec& spec,
                                               const BufferSocket* buffers,
                                               absl::string_view what);

  void Widen() const;   // buffer -> staging (16-bit only)
  void Narrow() const;  // staging -> buffer (16-bit only)

  LocalTensor local;  // data: the buffer (FP32) or `staging`
  std::vector<int64_t> shape;
  gift::v1::DType dtype = gift::v1::DTYPE_FLOAT32;
  std::shared_ptr<const SharedBuffer> mapping;  // keeps `bytes` mapped
  char* bytes = nullptr;                        // the tensor in the buffer
  std::vector<float> staging;                   // 16-bit buffers only
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_REGISTERED_TENSOR_H_
