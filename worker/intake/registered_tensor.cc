#include "worker/intake/registered_tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/tensor_shape.h"
#include "worker/intake/dtype_conversion.h"

namespace gift::worker {
namespace {

// `s` with the tensor and the copy's direction ("from the device") ahead of
// its message; OK stays OK.
absl::Status DeviceCopyStatus(absl::Status s, absl::string_view tensor, absl::string_view where) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("tensor '", tensor, "' ", where, ": ", s.message()));
}

// Checks a CUDA IPC buffer's location and opens its range (errors without
// the tensor's name; View adds it).
absl::StatusOr<char*> OpenDevice(const gift::v1::SharedBuffer& buffer, uint64_t element_bytes,
                                 const DeviceAccess& device) {
  if (device.memory == nullptr) {
    return device.unavailable.ok() ? absl::FailedPreconditionError("no device memory")
                                   : device.unavailable;
  }
  if (buffer.cuda_ipc_handle().size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc_handle of ", buffer.cuda_ipc_handle().size(),
                     " bytes; a cudaIpcMemHandle_t has ", kCudaIpcHandleBytes));
  }
  const int count = device.memory->device_count();
  if (buffer.cuda_device() < 0 || buffer.cuda_device() >= count) {
    return absl::InvalidArgumentError(absl::StrCat("cuda_device ", buffer.cuda_device(),
                                                   " out of range (this worker sees ", count,
                                                   " CUDA devices)"));
  }
  if (buffer.offset_bytes() % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset_bytes ", buffer.offset_bytes(),
                                                   " is not a multiple of the element size ",
                                                   element_bytes));
  }
  auto opened = device.memory->Open(buffer.cuda_ipc_handle(), buffer.cuda_device(),
                                    buffer.offset_bytes(), buffer.size_bytes());
  if (!opened.ok()) return opened.status();
  return static_cast<char*>(*opened);
}

}  // namespace

absl::StatusOr<RegisteredTensor> RegisteredTensor::View(const gift::v1::BufferSpec& b,
                                                        const BufferSocket* buffers,
                                                        const DeviceAccess& device,
                                                        absl::string_view what) {
  auto error = [&](absl::StatusCode code, absl::string_view message) {
    return absl::Status(code, absl::StrCat(what, ": ", message));
  };
  if (b.name().empty()) return error(absl::StatusCode::kInvalidArgument, "empty name");
  const uint64_t element_bytes = rpc::DTypeBytes(b.dtype());
  if (element_bytes == 0) {
    return error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("dtype ", gift::v1::DType_Name(b.dtype()),
                              "; DTYPE_FLOAT32, DTYPE_BFLOAT16 and DTYPE_FLOAT16 are supported"));
  }
  absl::StatusOr<uint64_t> counted = TensorElements(b.shape());
  if (!counted.ok()) return error(absl::StatusCode::kInvalidArgument, counted.status().message());
  const uint64_t elements = *counted;
  const bool on_device = b.buffer().location_case() == gift::v1::SharedBuffer::kCudaIpcHandle;
  switch (b.buffer().location_case()) {
    case gift::v1::SharedBuffer::kHandle:
    case gift::v1::SharedBuffer::kCudaIpcHandle:
      break;
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
  RegisteredTensor r;
  if (on_device) {
    auto opened = OpenDevice(b.buffer(), element_bytes, device);
    if (!opened.ok()) return error(opened.status().code(), opened.status().message());
    r.bytes = *opened;
    r.device_memory = device.memory;
  } else {
    if (buffers == nullptr) {
      return error(absl::StatusCode::kFailedPrecondition,
                   "this worker has no buffer socket (start it with --socket)");
    }
    auto mapping = buffers->Find(b.buffer().handle());
    if (!mapping.ok()) return error(mapping.status().code(), mapping.status().message());
    auto bytes =
        (*mapping)->Range(b.buffer().offset_bytes(), b.buffer().size_bytes(), element_bytes);
    if (!bytes.ok()) return error(bytes.status().code(), bytes.status().message());
    r.mapping = *std::move(mapping);
    r.bytes = *bytes;
  }
  const uint64_t cols = static_cast<uint64_t>(b.shape(b.shape_size() - 1));
  r.local.name = b.name();
  r.local.rows = elements / cols;
  r.local.cols = cols;
  r.shape.assign(b.shape().begin(), b.shape().end());
  r.dtype = b.dtype();
  if (b.dtype() == gift::v1::DTYPE_FLOAT32 && on_device && device.engine_device_stage) {
    r.local.data = reinterpret_cast<float*>(r.bytes);
    r.local.device = true;  // zero copy: the engine's device stage reads it
  } else if (b.dtype() == gift::v1::DTYPE_FLOAT32 && on_device) {
    r.staging.resize(elements);  // staged: copied in and out whole
    r.local.data = r.staging.data();
  } else if (b.dtype() == gift::v1::DTYPE_FLOAT32) {
    r.local.data = reinterpret_cast<float*>(r.bytes);
  } else {
    r.staging.resize(elements);
    r.local.data = r.staging.data();  // a moved vector keeps its storage
    if (on_device) r.scratch.resize(elements);
  }
  return r;
}

absl::Status RegisteredTensor::Widen() const {
  const size_t n = local.rows * local.cols;
  if (dtype == gift::v1::DTYPE_FLOAT32) {
    if (device_memory == nullptr || local.device) return absl::OkStatus();
    return DeviceCopyStatus(device_memory->CopyToHost(local.data, bytes, n * sizeof(float)),
                            local.name, "from the device");
  }
  const auto* src = reinterpret_cast<const uint16_t*>(bytes);
  if (device_memory != nullptr) {
    if (absl::Status s =
            DeviceCopyStatus(device_memory->CopyToHost(scratch.data(), bytes, n * sizeof(uint16_t)),
                             local.name, "from the device");
        !s.ok()) {
      return s;
    }
    src = scratch.data();
  }
  if (dtype == gift::v1::DTYPE_BFLOAT16) Bf16ToF32(src, local.data, n);
  if (dtype == gift::v1::DTYPE_FLOAT16) F16ToF32(src, local.data, n);
  return absl::OkStatus();
}

absl::Status RegisteredTensor::Narrow() const {
  const size_t n = local.rows * local.cols;
  if (dtype == gift::v1::DTYPE_FLOAT32 && (device_memory == nullptr || local.device)) {
    return absl::OkStatus();
  }
  absl::Status s;
  if (dtype == gift::v1::DTYPE_FLOAT32) {
    s = device_memory->CopyToDevice(bytes, local.data, n * sizeof(float));
  } else {
    auto* dst = device_memory != nullptr ? scratch.data() : reinterpret_cast<uint16_t*>(bytes);
    if (dtype == gift::v1::DTYPE_BFLOAT16) F32ToBf16(local.data, dst, n);
    if (dtype == gift::v1::DTYPE_FLOAT16) F32ToF16(local.data, dst, n);
    if (device_memory == nullptr) return absl::OkStatus();
    s = device_memory->CopyToDevice(bytes, scratch.data(), n * sizeof(uint16_t));
  }
  return DeviceCopyStatus(std::move(s), local.name, "to the device");
}

absl::Status ReadTensor(const LocalTensor& t, const DeviceMemory* memory, std::vector<float>* out) {
  const uint64_t n = t.rows * t.cols;
  if (!t.device) {
    out->assign(t.data, t.data + n);
    return absl::OkStatus();
  }
  if (memory == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", t.name, "' is in device memory and this worker has none"));
  }
  out->resize(n);
  return DeviceCopyStatus(memory->CopyToHost(out->data(), t.data, n * sizeof(float)), t.name,
                          "from the device");
}

}  // namespace gift::worker
