#include "worker/registered_tensor.h"

#include "absl/strings/str_cat.h"
#include "common/base/tensor_shape.h"
#include "worker/dtype_conversion.h"

namespace gift::worker {
namespace {

// Bytes per element of a buffer dtype; 0 for one the worker does not take.
uint64_t ElementBytes(gift::v1::DType dtype) {
  switch (dtype) {
    case gift::v1::DTYPE_FLOAT32:
      return 4;
    case gift::v1::DTYPE_BFLOAT16:
    case gift::v1::DTYPE_FLOAT16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<RegisteredTensor> RegisteredTensor::View(const gift::v1::BufferSpec& b,
                                                       const BufferSocket* buffers,
                                                       absl::string_view what) {
  auto error = [&](absl::StatusCode code, absl::string_view message) {
    return absl::Status(code, absl::StrCat(what, ": ", message));
  };
  if (b.name().empty()) return error(absl::StatusCode::kInvalidArgument, "empty name");
  const uint64_t element_bytes = ElementBytes(b.dtype());
  if (element_bytes == 0) {
    return error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("dtype ", gift::v1::DType_Name(b.dtype()),
                              "; DTYPE_FLOAT32, DTYPE_BFLOAT16 and DTYPE_FLOAT16 are supported"));
  }
  absl::StatusOr<uint64_t> counted = TensorElements(b.shape());
  if (!counted.ok()) return error(absl::StatusCode::kInvalidArgument, counted.status().message());
  const uint64_t elements = *counted;
  switch (b.buffer().location_case()) {
    case gift::v1::SharedBuffer::kHandle:
      break;
    case gift::v1::SharedBuffer::kCudaIpcHandle:
      return error(absl::StatusCode::kUnimplemented,
                   "CUDA IPC buffers need a gift-worker built with CUDA device support; "
                   "register host buffers");
    case gift::v1::SharedBuffer::kShmName:
      return error(absl::StatusCode::kInvalidArgument,
                   "named shared-memory buffers (shm_name) are refused: their writer can shrink "
                   "them at any time and make the worker fault; hand a sealed memfd to the "
                   "buffer socket (WorkerInfo.buffer_socket) and register its handle");
    default:
      return error(absl::StatusCode::kInvalidArgument, "no shared buffer");
  }
  if (b.buffer().size_bytes() != elements * element_bytes) {
    return error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("buffer of ", b.buffer().size_bytes(), " bytes for ", elements, " ",
                              gift::v1::DType_Name(b.dtype()), " elements"));
  }
  if (buffers == nullptr) {
    return error(absl::StatusCode::kFailedPrecondition,
                 "this worker has no buffer socket (start it with --socket)");
  }
  auto mapping = buffers->Find(b.buffer().handle());
  if (!mapping.ok()) return error(mapping.status().code(), mapping.status().message());
  auto bytes = (*mapping)->Range(b.buffer().offset_bytes(), b.buffer().size_bytes(),
                                 element_bytes);
  if (!bytes.ok()) return error(bytes.status().code(), bytes.status().message());
  const uint64_t cols = static_cast<uint64_t>(b.shape(b.shape_size() - 1));
  RegisteredTensor r;
  r.local.name = b.name();
  r.local.rows = elements / cols;
  r.local.cols = cols;
  r.shape.assign(b.shape().begin(), b.shape().end());
  r.dtype = b.dtype();
  r.mapping = *std::move(mapping);
  r.bytes = *bytes;
  if (b.dtype() == gift::v1::DTYPE_FLOAT32) {
    r.local.data = reinterpret_cast<float*>(r.bytes);
  } else {
    r.staging.resize(elements);
    r.local.data = r.staging.data();  // a moved vector keeps its storage
  }
  return r;
}

void RegisteredTensor::Widen() const {
  const size_t n = local.rows * local.cols;
  const auto* src = reinterpret_cast<const uint16_t*>(bytes);
  if (dtype == gift::v1::DTYPE_BFLOAT16) Bf16ToF32(src, local.data, n);
  if (dtype == gift::v1::DTYPE_FLOAT16) F16ToF32(src, local.data, n);
}

void RegisteredTensor::Narrow() const {
  const size_t n = local.rows * local.cols;
  auto* dst = reinterpret_cast<uint16_t*>(bytes);
  if (dtype == gift::v1::DTYPE_BFLOAT16) F32ToBf16(local.data, dst, n);
  if (dtype == gift::v1::DTYPE_FLOAT16) F32ToF16(local.data, dst, n);
}

}  // namespace gift::worker
