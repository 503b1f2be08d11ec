// Device tensors for WorkerClient::Register (worker_client.h): gradients in
// CUDA device memory that the worker opens by CUDA IPC
// (gift.v1.SharedBuffer.cuda_ipc_handle), with no copy through host memory.
//
// This header and gift_worker_client know nothing of CUDA: a DeviceBuffer is
// a plain description (the cudaIpcMemHandle_t bytes of the allocation, the
// device, the tensor's offset from the allocation's base, its size). On a
// build with CUDA, worker/client/cuda_device_buffer.h
// (gift_worker_client_cuda) makes one from a raw device pointer.
//
// Contract (worker.proto): the training process synchronizes its writes to
// the tensor (its stream) before PushPull; the worker's writes of the
// average are complete when PushPull returns; the allocation must stay alive
// (not cudaFree'd) while the tensor is registered.
//
// Ownership: plain values; a DeviceTensor owns no device memory (the
// training process does). Thread safety: none needed (immutable values).
#ifndef GIFT_WORKER_CLIENT_DEVICE_TENSOR_H_
#define GIFT_WORKER_CLIENT_DEVICE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/rpc/buffer_contract.h"
#include "gift/v1/cluster.pb.h"

namespace gift::client {

using rpc::DTypeBytes;
using rpc::kCudaIpcHandleBytes;

// Where a device tensor lives.
struct DeviceBuffer {
  std::string ipc_handle;     // kCudaIpcHandleBytes bytes: the allocation's handle
  int device = 0;             // the exporter's CUDA device index
  uint64_t offset_bytes = 0;  // of the tensor, from the allocation's base
  uint64_t size_bytes = 0;    // of the tensor
  // The tensor's device address in this process, for DeviceTensor's
  // convenience only: never dereferenced, never sent.
  void* address = nullptr;
};

// A device tensor to register. dtype: DTYPE_FLOAT32, DTYPE_BFLOAT16 or
// DTYPE_FLOAT16 (the worker averages in FP32 and rounds back);
// buffer.size_bytes must be the elements times the element size, and
// buffer.offset_bytes a multiple of the element size.
struct DeviceTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  gift::v1::DType dtype = gift::v1::DTYPE_FLOAT32;
  DeviceBuffer buffer;
};

// A registered device tensor. It has no host data(): its memory is the
// training process's device allocation (device_address(), which is
// buffer.address as given), read and written by the worker during PushPull.
class DeviceTensor {
 public:
  DeviceTensor(DeviceTensorSpec spec, uint64_t tensor_id)
      : spec_(std::move(spec)), tensor_id_(tensor_id) {}

  const std::string& name() const { return spec_.name; }
  const std::vector<int64_t>& shape() const { return spec_.shape; }
  gift::v1::DType dtype() const { return spec_.dtype; }
  // The cluster-wide id the coordinator assigned to the name.
  uint64_t tensor_id() const { return tensor_id_; }
  int device() const { return spec_.buffer.device; }
  void* device_address() const { return spec_.buffer.address; }
  size_t size_bytes() const { return spec_.buffer.size_bytes; }
  const DeviceBuffer& buffer() const { return spec_.buffer; }

 private:
  DeviceTensorSpec spec_;
  uint64_t tensor_id_;
};

}  // namespace gift::client

#endif  // GIFT_WORKER_CLIENT_DEVICE_TENSOR_H_
